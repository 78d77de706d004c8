package controller_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/render"
)

// A pass over objects that nothing changed since the operator's last pass
// must send no write request: at a thousand Agents, every resync would
// otherwise send thousands.
var _ = Describe("A reconcile that finds nothing changed", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("sends no write for an applied Agent, or the ToolSource and MediaStore it uses", func() {
		create(
			secretFixture(ns, "openai", map[string]string{"api-key": "sk-test"}),
			secretFixture(ns, "mcp", map[string]string{"token": "Bearer t"}),
		)
		ts := toolSourceFixture(ns, "tickets", withHeaderFromSecret("Authorization", "mcp", "token"))
		ms := mediaStoreFixture(ns, "media")
		// Server defaults and canonical forms the apply must not mistake for
		// a difference: quantities in other spellings and below a
		// thousandth, a field reference without its API version,
		// tolerations, pull secrets.
		agent := agentFixture(ns, "steady", withOpenAIKey("openai", "api-key"), withToolSources("tickets"),
			withMediaStore("media"), withReplicas(2), func(a *agentsv1.Agent) {
				a.Spec.Workers.Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100u"), corev1.ResourceMemory: resource.MustParse("1024Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				}
				a.Spec.Workers.Env = []corev1.EnvVar{
					{Name: "REGION", Value: "eu"},
					{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				}
				a.Spec.Workers.NodeSelector = map[string]string{"pool": "agents"}
				a.Spec.Workers.Tolerations = []corev1.Toleration{{Key: "agents", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
				a.Spec.Workers.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
			})
		create(ts, ms, agent)
		expectReady(ts, ms, agent)
		expectCacheCaughtUp(append(ownedObjects(agent), agent, ts, ms)...)

		Expect(map[string][]string{
			"Agent":      agentPassWrites(agent),
			"ToolSource": toolSourcePassWrites(ts),
			"MediaStore": mediaStorePassWrites(ms),
		}).To(HaveEach(BeEmpty()))
		expectReady(ts, ms, agent)
	})

	It("sends no write for an Agent blocked by a missing ToolSource", func() {
		agent := agentFixture(ns, "waiting", withToolSources("absent"))
		create(agent)
		Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotFound))
		expectCacheCaughtUp(agent)

		Expect(agentPassWrites(agent)).To(BeEmpty())
	})

	It("sends no write for an Agent rechecked while an object it does not own is in the way", func() {
		create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.GraphConfigMapName("blocked")}})
		agent := agentFixture(ns, "blocked")
		create(agent)
		Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonOwnedObjectConflict))
		expectCacheCaughtUp(agent)

		Expect(agentPassWrites(agent)).To(BeEmpty())
	})
})

// ownedObjects are the objects the operator applies for an Agent.
func ownedObjects(agent *agentsv1.Agent) []client.Object {
	GinkgoHelper()
	deployment := workerDeployment(Default, agent)
	return []client.Object{
		deployment,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agent.Namespace, Name: render.ConfigMapOf(&deployment.Spec.Template)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agent.Namespace, Name: render.GraphConfigMapName(agent.Name)}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: agent.Namespace, Name: render.WorkerName(agent.Name)}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: agent.Namespace, Name: render.DisruptionBudgetName(agent.Name)}},
	}
}

// expectCacheCaughtUp waits until the operator's cache holds each object as
// the API server does, so a pass reads what is there.
func expectCacheCaughtUp(objs ...client.Object) {
	GinkgoHelper()
	for _, obj := range objs {
		Eventually(func(g Gomega) {
			live := obj.DeepCopyObject().(client.Object)
			cached := obj.DeepCopyObject().(client.Object)
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(obj), live)).To(Succeed())
			g.Expect(suiteManager.GetCache().Get(suiteCtx, client.ObjectKeyFromObject(obj), cached)).To(Succeed())
			g.Expect(cached.GetResourceVersion()).To(Equal(live.GetResourceVersion()), "%T %s", obj, obj.GetName())
		}).Should(Succeed())
	}
}

// agentPassWrites runs one pass of the Agent reconciler, as the operator
// runs it, and returns the write requests it sent.
func agentPassWrites(agent *agentsv1.Agent) []string {
	GinkgoHelper()
	var writes writeRecorder
	c := writes.client()
	return writes.pass(&controller.AgentReconciler{
		Client: c, APIReader: directClient(), Defaults: operatorDefaults, RecheckInterval: time.Second,
	}, agent)
}

func toolSourcePassWrites(ts *agentsv1.ToolSource) []string {
	GinkgoHelper()
	var writes writeRecorder
	return writes.pass(&controller.ToolSourceReconciler{Client: writes.client(), APIReader: directClient()}, ts)
}

func mediaStorePassWrites(ms *agentsv1.MediaStore) []string {
	GinkgoHelper()
	var writes writeRecorder
	return writes.pass(&controller.MediaStoreReconciler{
		Client: writes.client(), APIReader: directClient(), HostPathRoots: operatorDefaults.MediaHostPathRoots,
	}, ms)
}

// directClient reads from the API server as the operator.
func directClient() client.Client {
	GinkgoHelper()
	c, err := client.New(operatorConfig, client.Options{Scheme: k8sClient.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// writeRecorder records the write requests a reconciler sends through its
// client.
type writeRecorder struct {
	mu     sync.Mutex
	writes []string
}

func (w *writeRecorder) record(verb string, obj any, subresource string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	what := fmt.Sprintf("%T", obj)
	if o, ok := obj.(client.Object); ok {
		what += " " + o.GetName()
	}
	if subresource != "" {
		what += " " + subresource
	}
	w.writes = append(w.writes, verb+" "+what)
}

// pass runs one reconcile of obj and returns the writes it sent.
func (w *writeRecorder) pass(r reconcile.Reconciler, obj client.Object) []string {
	GinkgoHelper()
	_, err := r.Reconcile(suiteCtx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	Expect(err).NotTo(HaveOccurred())
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// client is the operator's client: it reads from the running operator's
// cache and writes to the API server as the operator, and each write is
// recorded.
func (w *writeRecorder) client() client.Client {
	GinkgoHelper()
	c, err := client.NewWithWatch(operatorConfig, client.Options{
		Scheme: k8sClient.Scheme(),
		Cache:  &client.CacheOptions{Reader: suiteManager.GetCache()},
	})
	Expect(err).NotTo(HaveOccurred())
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.record("create", obj, "")
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.record("update", obj, "")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.record("patch", obj, "")
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w.record("apply", obj, "")
			return c.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.record("delete", obj, "")
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			w.record("deletecollection", obj, "")
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			w.record("create", obj, sub)
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.record("update", obj, sub)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			w.record("patch", obj, sub)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			w.record("apply", obj, sub)
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
}
