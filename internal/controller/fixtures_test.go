package controller_test

import (
	"fmt"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
)

var namespaceCount atomic.Int64

// newNamespace creates a namespace of its own for one test.
func newNamespace() string {
	name := fmt.Sprintf("test-%d", namespaceCount.Add(1))
	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

type agentOption func(*agentsv1.Agent)

// agentFixture is a valid Agent on the scripted model; options change what
// a test is about.
func agentFixture(namespace, name string, opts ...agentOption) *agentsv1.Agent {
	a := &agentsv1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: agentsv1.AgentSpec{
			FlowType: "Flow" + fmt.Sprint(namespaceCount.Load()) + "x" + name,
			Model:    agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"},
		},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

func withFlowType(flowType string) agentOption {
	return func(a *agentsv1.Agent) { a.Spec.FlowType = flowType }
}

func withToolSources(names ...string) agentOption {
	return func(a *agentsv1.Agent) {
		for _, n := range names {
			a.Spec.ToolSources = append(a.Spec.ToolSources, agentsv1.LocalObjectReference{Name: n})
		}
	}
}

func withMediaStore(name string) agentOption {
	return func(a *agentsv1.Agent) { a.Spec.MediaStore = &agentsv1.LocalObjectReference{Name: name} }
}

func withOpenAIKey(secret, key string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Model = agentsv1.ModelSpec{
			Provider:        agentsv1.ModelProviderOpenAI,
			Name:            "gpt-5-mini",
			APIKeySecretRef: &agentsv1.SecretKeyReference{Name: secret, Key: key},
		}
	}
}

func withEngine(address, namespace string) agentOption {
	return func(a *agentsv1.Agent) {
		a.Spec.Engine = &agentsv1.EngineSpec{Address: address, Namespace: namespace}
	}
}

func withEngineRef(name string) agentOption {
	return func(a *agentsv1.Agent) { a.Spec.EngineRef = &agentsv1.EngineReference{Name: name} }
}

// clusterEngineFixture is a ClusterEngine of every namespace.
func clusterEngineFixture(name, address, namespace string) *agentsv1.ClusterEngine {
	return &agentsv1.ClusterEngine{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: agentsv1.ClusterEngineSpec{Address: address, Namespace: namespace, NamespaceSelector: &metav1.LabelSelector{}}}
}

func withReplicas(n int32) agentOption {
	return func(a *agentsv1.Agent) {
		if a.Spec.Workers == nil {
			a.Spec.Workers = &agentsv1.WorkersSpec{}
		}
		a.Spec.Workers.Replicas = ptr.To(n)
	}
}

type toolSourceOption func(*agentsv1.ToolSource)

// toolSourceFixture is a valid stdio ToolSource.
func toolSourceFixture(namespace, name string, opts ...toolSourceOption) *agentsv1.ToolSource {
	ts := &agentsv1.ToolSource{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: agentsv1.ToolSourceSpec{
			MCP: agentsv1.MCPServer{Stdio: &agentsv1.MCPStdio{Command: "mcp-server-" + name}},
		},
	}
	for _, o := range opts {
		o(ts)
	}
	return ts
}

func withSourceName(name string) toolSourceOption {
	return func(ts *agentsv1.ToolSource) { ts.Spec.SourceName = name }
}

func withHeaderFromSecret(header, secret, key string) toolSourceOption {
	return func(ts *agentsv1.ToolSource) {
		ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{
			URL: "https://mcp.example.com/" + ts.Name,
			Headers: []agentsv1.HTTPHeader{{Name: header, ValueFrom: &agentsv1.SecretValueSource{
				SecretKeyRef: agentsv1.SecretKeyReference{Name: secret, Key: key}}}},
		}}
	}
}

func withHeader(name, value string) toolSourceOption {
	return func(ts *agentsv1.ToolSource) {
		ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{
			URL: "https://mcp.example.com/" + ts.Name, Headers: []agentsv1.HTTPHeader{{Name: name, Value: &value}},
		}}
	}
}

type mediaStoreOption func(*agentsv1.MediaStore)

// mediaStoreFixture is a valid local directory MediaStore on the node,
// under the host path root the operator allows in these tests.
func mediaStoreFixture(namespace, name string, opts ...mediaStoreOption) *agentsv1.MediaStore {
	ms := &agentsv1.MediaStore{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: agentsv1.MediaStoreSpec{
			LocalDirectory: &agentsv1.LocalDirectoryMediaStore{Root: mediaHostPathRoot + "/" + namespace + "/media"},
		},
	}
	for _, o := range opts {
		o(ms)
	}
	return ms
}

func withLocalDirectory(root, claim string) mediaStoreOption {
	return func(ms *agentsv1.MediaStore) {
		ms.Spec = agentsv1.MediaStoreSpec{LocalDirectory: &agentsv1.LocalDirectoryMediaStore{Root: root, PersistentVolumeClaimName: claim}}
	}
}

func withS3Credentials(bucket, secret string) mediaStoreOption {
	return func(ms *agentsv1.MediaStore) {
		ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{
			Bucket: bucket, Endpoint: "http://127.0.0.1:7070", ForcePathStyle: true,
			CredentialsSecretRef: &agentsv1.SecretReference{Name: secret},
		}}
	}
}

func secretFixture(namespace, name string, data map[string]string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, StringData: data}
}

func create(objs ...client.Object) {
	GinkgoHelper()
	for _, o := range objs {
		Expect(k8sClient.Create(suiteCtx, o)).To(Succeed())
	}
}

// conditionOf reads one condition of an object's status.
func conditionOf(obj client.Object, conditionType string) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		var conditions []metav1.Condition
		switch o := obj.(type) {
		case *agentsv1.Agent:
			conditions = o.Status.Conditions
		case *agentsv1.ToolSource:
			conditions = o.Status.Conditions
		case *agentsv1.MediaStore:
			conditions = o.Status.Conditions
		case *agentsv1.ClusterEngine:
			conditions = o.Status.Conditions
		default:
			Fail(fmt.Sprintf("no conditions on %T", obj))
		}
		return meta.FindStatusCondition(conditions, conditionType)
	}
}

// haveStatusReason matches a condition with this status and reason.
func haveStatusReason(status metav1.ConditionStatus, reason string) OmegaMatcher {
	return And(Not(BeNil()),
		HaveField("Status", status),
		HaveField("Reason", reason))
}

// expectReady waits until every object has Ready=True for its current
// generation.
func expectReady(objs ...client.Object) {
	GinkgoHelper()
	for _, obj := range objs {
		Eventually(func(g Gomega) {
			c := conditionOf(obj, agentsv1.ConditionReady)(g)
			g.Expect(c).To(haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonReconciled), "%T %s", obj, obj.GetName())
			g.Expect(c.ObservedGeneration).To(Equal(obj.GetGeneration()))
		}).Should(Succeed())
	}
}

// workerDeployment reads an Agent's worker Deployment.
func workerDeployment(g Gomega, agent *agentsv1.Agent) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: agent.Namespace, Name: render.WorkerName(agent.Name)}, d)).To(Succeed())
	return d
}

// configDigest reads the digest the worker pods were rendered with.
func configDigest(agent *agentsv1.Agent) func(Gomega) string {
	return func(g Gomega) string {
		return workerDeployment(g, agent).Spec.Template.Annotations[render.AnnotationConfigDigest]
	}
}

// change applies mutate to obj with a merge patch, which carries no
// resourceVersion, so the controller's status writes never make it conflict.
func change[T client.Object](obj T, mutate func(T)) error {
	before := obj.DeepCopyObject().(T)
	mutate(obj)
	return k8sClient.Patch(suiteCtx, obj, client.MergeFrom(before))
}

// withWorker runs the Agent's workers from an image that carries an engine
// version.
func withWorker(image, engineVersion string) agentOption {
	return func(a *agentsv1.Agent) {
		if a.Spec.Workers == nil {
			a.Spec.Workers = &agentsv1.WorkersSpec{}
		}
		a.Spec.Workers.Image, a.Spec.Workers.EngineVersion = image, engineVersion
	}
}

// workerOf is the worker a Deployment's template runs.
func workerOf(d *appsv1.Deployment) rollout.Worker {
	engineVersion, image := render.WorkerOf(d.Spec.Template.Labels, &d.Spec.Template.Spec)
	return rollout.Worker{EngineVersion: engineVersion, Image: image}
}

// podFinalizer keeps a deleted test pod terminating until releasePod: no
// kubelet runs here to finish it.
const podFinalizer = "test.stepwise.run/hold"

// createWorkerPod writes a pod of a worker Deployment, as its ReplicaSet
// would, running the given worker.
func createWorkerPod(d *appsv1.Deployment, name string, w rollout.Worker) *corev1.Pod {
	GinkgoHelper()
	template := d.Spec.Template.DeepCopy()
	template.Labels[render.LabelEngineVersion] = w.EngineVersion
	for i := range template.Spec.Containers {
		template.Spec.Containers[i].Image = w.Image
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: name, Labels: template.Labels, Finalizers: []string{podFinalizer}},
		Spec:       template.Spec,
	}
	create(pod)
	return pod
}

// setPodReady writes the Ready condition a kubelet would.
func setPodReady(pod *corev1.Pod, ready bool) {
	GinkgoHelper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	Expect(k8sClient.Status().Update(suiteCtx, pod)).To(Succeed())
}

// releasePod drops the test's finalizer, so a deleted pod goes away.
func releasePod(pod *corev1.Pod) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		pod.Finalizers = nil
		g.Expect(k8sClient.Update(suiteCtx, pod)).To(Succeed())
	}).Should(Succeed())
}

// progressingMessage reads the message of an Agent's Progressing condition.
func progressingMessage(agent *agentsv1.Agent) func(Gomega) string {
	return func(g Gomega) string {
		c := conditionOf(agent, agentsv1.ConditionProgressing)(g)
		g.Expect(c).NotTo(BeNil())
		return c.Message
	}
}

// mapTo maps a list.
func mapTo[T, U any](in []T, f func(T) U) []U {
	out := make([]U, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}
