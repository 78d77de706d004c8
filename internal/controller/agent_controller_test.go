package controller_test

import (
	"encoding/json"
	"maps"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

var _ = Describe("Agent reconciler", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("creates the worker ConfigMap, ServiceAccount, Deployment and Flow graph, owned by the Agent", func() {
		secret := secretFixture(ns, "openai", map[string]string{"api-key": "sk-test-value"})
		ts := toolSourceFixture(ns, "files")
		ms := mediaStoreFixture(ns, "media")
		agent := agentFixture(ns, "support", withOpenAIKey("openai", "api-key"), withToolSources("files"), withMediaStore("media"))
		create(secret, ts, ms, agent)
		expectReady(ts, ms, agent)

		deployment := workerDeployment(Default, agent)
		owned := []client.Object{
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: render.ConfigMapOf(&deployment.Spec.Template)}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: render.GraphConfigMapName(agent.Name)}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: render.WorkerName(agent.Name)}},
			deployment,
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: render.DisruptionBudgetName(agent.Name)}},
			&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: render.NetworkPolicyName(agent.Name)}},
		}
		for _, obj := range owned {
			obj.SetNamespace(ns)
			Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			Expect(obj.GetOwnerReferences()).To(ConsistOf(And(
				HaveField("APIVersion", agentsv1.GroupVersion.String()),
				HaveField("Kind", "Agent"),
				HaveField("Name", agent.Name),
				HaveField("UID", agent.UID),
				HaveField("Controller", ptr.To(true)),
				HaveField("BlockOwnerDeletion", ptr.To(true)),
			)), "%T %s", obj, obj.GetName())
			Expect(obj.GetManagedFields()).To(ContainElement(HaveField("Manager", render.FieldOwner)), "%T %s", obj, obj.GetName())
		}

		By("letting a node drain evict one worker at a time, across every worker version")
		budget := owned[4].(*policyv1.PodDisruptionBudget)
		Expect(budget.Spec.MaxUnavailable).To(Equal(ptr.To(intstr.FromInt32(1))))
		Expect(budget.Spec.Selector.MatchLabels).To(Equal(render.SelectorLabels(agent.Name)))
		Expect(budget.Spec.UnhealthyPodEvictionPolicy).To(Equal(ptr.To(policyv1.AlwaysAllow)))

		By("letting into the workers only the probes, and metric scrapes from the monitoring namespace")
		policy := owned[5].(*networkingv1.NetworkPolicy)
		Expect(policy.Spec.PodSelector.MatchLabels).To(Equal(render.SelectorLabels(agent.Name)))
		Expect(policy.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
		Expect(policy.Spec.Ingress).To(HaveLen(2))
		Expect(policy.Spec.Ingress[0].From).To(BeEmpty())
		Expect(policy.Spec.Ingress[0].Ports[0].Port.IntValue()).To(Equal(render.HealthPort))
		Expect(policy.Spec.Ingress[1].Ports[0].Port.IntValue()).To(Equal(render.MetricsPort))
		Expect(policy.Spec.Ingress[1].From).To(ConsistOf(HaveField("NamespaceSelector.MatchLabels",
			map[string]string{corev1.LabelMetadataName: "monitoring"})))

		By("giving a stopping worker as long as the longest Step attempt the Agent allows")
		// The stdio ToolSource's defaults: a ten-minute request, then up to
		// ten minutes polling its task.
		Expect(deployment.Spec.Template.Spec.TerminationGracePeriodSeconds).To(Equal(ptr.To(int64(20*60 + 15))))
		Expect(deployment.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--stop-timeout=20m0s"))

		By("rendering one complete, immutable worker configuration with no secret in it")
		cm := owned[0].(*corev1.ConfigMap)
		Expect(cm.Immutable).To(Equal(ptr.To(true)))
		doc := cm.Data[workerconfig.FileName]
		Expect(doc).NotTo(ContainSubstring("sk-test-value"))
		cfg, err := workerconfig.Decode([]byte(doc))
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg.FlowType).To(Equal(agent.Spec.FlowType))
		Expect(cfg.Engine.Address).To(Equal(temporal.FrontendHostPort()))
		Expect(cfg.Engine.TaskQueue).To(Equal("stepwise/" + ns + "/" + agent.Spec.FlowType))
		Expect(cfg.Agent).To(Equal(workerconfig.AgentRef{Namespace: ns, Name: agent.Name, UID: string(agent.UID)}))
		Expect(cfg.TaskSlots).To(Equal(int32(100)))
		Expect(cfg.ToolSources).To(HaveLen(1))
		Expect(cfg.ToolSources[0].SourceName).To(Equal("files"))
		Expect(cfg.MediaStore).NotTo(BeNil())
		Expect(cfg.Definition.Model.APIKey).NotTo(BeNil())
		keyEnv := cfg.Definition.Model.APIKey.Env

		By("passing the key to the worker as an environment variable from the Secret")
		Expect(*deployment.Spec.Replicas).To(Equal(int32(1)))
		Expect(deployment.Labels).To(HaveKeyWithValue(render.LabelMediaStore, "media"))
		pod := deployment.Spec.Template
		Expect(pod.Labels).To(HaveKeyWithValue(render.LabelEngineVersion, stockEngineVersion))
		Expect(pod.Annotations).To(HaveKeyWithValue(render.AnnotationConfigDigest, agent.Status.ConfigDigest))
		Expect(pod.Spec.ServiceAccountName).To(Equal(render.WorkerName(agent.Name)))
		Expect(pod.Spec.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
		container := pod.Spec.Containers[0]
		Expect(container.Image).To(Equal(stockWorkerImage))
		Expect(container.Env).To(ContainElement(And(
			HaveField("Name", keyEnv),
			HaveField("ValueFrom.SecretKeyRef.Name", "openai"),
			HaveField("ValueFrom.SecretKeyRef.Key", "api-key"),
		)))
		Expect(container.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
		Expect(container.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))

		By("handing the workers the Agent's own event hub publish token, through a Secret the Agent owns")
		Expect(cfg.EventHub).NotTo(BeNil())
		Expect(cfg.EventHub.URL).To(Equal(eventHubURL))
		Expect(cfg.EventHub.Token.Secret).To(Equal(render.EventHubSecretName(agent.Name)))
		Expect(container.Env).To(ContainElement(And(
			HaveField("Name", cfg.EventHub.Token.Env),
			HaveField("ValueFrom.SecretKeyRef.Name", render.EventHubSecretName(agent.Name)),
			HaveField("ValueFrom.SecretKeyRef.Key", render.EventHubTokenKey),
		)))
		tokenSecret := &corev1.Secret{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.EventHubSecretName(agent.Name)}, tokenSecret)).To(Succeed())
		publishToken := string(tokenSecret.Data[render.EventHubTokenKey])
		Expect(doc).NotTo(ContainSubstring(publishToken))
		claims, err := eventHubKeys.Check(publishToken, time.Now())
		Expect(err).NotTo(HaveOccurred())
		Expect(claims).To(And(HaveField("Namespace", ns), HaveField("Agent", agent.Name), HaveField("AgentUID", string(agent.UID))))
		Expect(claims.Expires).To(BeTemporally(">", time.Now().Add(hub.DefaultTokenLifetime-time.Hour)))
		Expect(metav1.IsControlledBy(tokenSecret, agent)).To(BeTrue())

		By("reporting what it applied")
		Expect(agent.Status.TaskQueue).To(Equal("stepwise/" + ns + "/" + agent.Spec.FlowType))
		Expect(agent.Status.SharedTaskQueue).To(BeEmpty())
		Expect(agent.Status.EngineID).To(Equal(engineID()))
		Expect(agent.Status.Selector).To(Equal(render.Selector(agent.Name)))
		Expect(agent.Status.ObservedGeneration).To(Equal(agent.Generation))
		graph := owned[1].(*corev1.ConfigMap)
		Expect(agent.Status.SessionFlowGraph).NotTo(BeNil())
		Expect(agent.Status.SessionFlowGraph.Digest).To(Equal(graph.Annotations[render.AnnotationGraphDigest]))
		var graphDoc map[string]any
		Expect(json.Unmarshal([]byte(graph.Data[render.GraphFileName]), &graphDoc)).To(Succeed())
		Expect(graphDoc).To(HaveKeyWithValue("flowType", agent.Spec.FlowType))
		// The graph of the engine the workers run, not the operator's own.
		workersGraph, err := session.Graph(agent.Spec.FlowType, stockEngineVersion)
		Expect(err).NotTo(HaveOccurred())
		Expect(graphDoc).To(HaveKeyWithValue("engineVersion", stockEngineVersion))
		Expect(graphDoc["steps"]).To(HaveLen(len(workersGraph.Steps)))
		Expect(conditionOf(agent, agentsv1.ConditionWorkersAvailable)(Default)).
			To(haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonDeploymentUnavailable))
	})

	It("uses a ServiceAccount the Agent names instead of creating one", func() {
		agent := agentFixture(ns, "own-sa", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{ServiceAccountName: "cloud-identity"}
		})
		create(agent)
		expectReady(agent)
		Expect(workerDeployment(Default, agent).Spec.Template.Spec.ServiceAccountName).To(Equal("cloud-identity"))
		err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &corev1.ServiceAccount{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue())
	})

	Describe("the config digest", func() {
		It("changes when a referenced Secret's value rotates, and the value appears in no object", func() {
			create(secretFixture(ns, "openai", map[string]string{"api-key": "first-key-value"}),
				agentFixture(ns, "rotate", withOpenAIKey("openai", "api-key")))
			agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rotate"}}
			expectReady(agent)
			first := configDigest(agent)(Default)

			rotateSecret(ns, "openai", "api-key", "second-key-value")
			Eventually(configDigest(agent)).ShouldNot(Equal(first))
			Eventually(func(g Gomega) string {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				return agent.Status.ConfigDigest
			}).Should(Equal(configDigest(agent)(Default)))

			for _, value := range []string{"first-key-value", "second-key-value"} {
				Expect(dumpNamespace(ns)).NotTo(ContainSubstring(value))
			}
		})

		It("changes when a Secret the workers receive through spec.workers.env rotates", func() {
			create(secretFixture(ns, "crm", map[string]string{"token": "one"}), agentFixture(ns, "env", func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{Env: []corev1.EnvVar{{Name: "CRM_TOKEN", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "crm"}, Key: "token"}}}}}
			}))
			agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "env"}}
			expectReady(agent)
			first := configDigest(agent)(Default)
			rotateSecret(ns, "crm", "token", "two")
			Eventually(configDigest(agent)).ShouldNot(Equal(first))
		})

		It("changes when a referenced ToolSource changes, or a Secret it references rotates", func() {
			create(secretFixture(ns, "tickets", map[string]string{"authorization": "Bearer one"}),
				toolSourceFixture(ns, "tickets", withHeaderFromSecret("Authorization", "tickets", "authorization")),
				agentFixture(ns, "ts-change", withToolSources("tickets")))
			agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ts-change"}}
			expectReady(agent)
			first := configDigest(agent)(Default)

			ts := &agentsv1.ToolSource{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "tickets"}, ts)).To(Succeed())
			firstConfig := render.ConfigMapOf(&workerDeployment(Default, agent).Spec.Template)
			Expect(change(ts, func(ts *agentsv1.ToolSource) {
				ts.Spec.RequestTimeout = &metav1.Duration{Duration: 90 * time.Second}
				ts.Spec.TaskWaitTimeout = &metav1.Duration{Duration: time.Hour}
			})).To(Succeed())
			Eventually(configDigest(agent)).ShouldNot(Equal(first))
			second := configDigest(agent)(Default)

			By("rolling the workers onto a new rendered config that carries the change")
			template := workerDeployment(Default, agent).Spec.Template
			Expect(render.ConfigMapOf(&template)).NotTo(Equal(firstConfig))
			cm := &corev1.ConfigMap{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapOf(&template)}, cm)).To(Succeed())
			cfg, err := workerconfig.Decode([]byte(cm.Data[workerconfig.FileName]))
			Expect(err).NotTo(HaveOccurred())
			Expect(cfg.ToolSources).To(ConsistOf(And(
				HaveField("SourceName", "tickets"),
				HaveField("RequestTimeout", metav1.Duration{Duration: 90 * time.Second}),
				HaveField("TaskWaitTimeout", metav1.Duration{Duration: time.Hour}),
			)))

			rotateSecret(ns, "tickets", "authorization", "Bearer two")
			Eventually(configDigest(agent)).ShouldNot(Equal(second))
		})

		It("changes when the referenced MediaStore changes, or its credentials rotate", func() {
			create(secretFixture(ns, "s3", map[string]string{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "one"}),
				mediaStoreFixture(ns, "media", withS3Credentials("bucket-one", "s3")),
				agentFixture(ns, "ms-change", withMediaStore("media")))
			agent := &agentsv1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ms-change"}}
			expectReady(agent)
			first := configDigest(agent)(Default)

			ms := &agentsv1.MediaStore{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "media"}, ms)).To(Succeed())
			Expect(change(ms, func(ms *agentsv1.MediaStore) { ms.Spec.S3.Prefix = "sessions" })).To(Succeed())
			Eventually(configDigest(agent)).ShouldNot(Equal(first))
			second := configDigest(agent)(Default)

			rotateSecret(ns, "s3", "AWS_SECRET_ACCESS_KEY", "two")
			Eventually(configDigest(agent)).ShouldNot(Equal(second))
		})

		It("stays the same, and nothing is rewritten, when nothing changed", func() {
			agent := agentFixture(ns, "steady")
			create(agent)
			expectReady(agent)
			graph := graphConfigMap(Default, agent)
			deployment := workerDeployment(Default, agent)

			// A label change is an event but no new generation.
			Expect(change(agent, func(a *agentsv1.Agent) { a.Labels = map[string]string{"team": "support"} })).To(Succeed())
			Consistently(func(g Gomega) {
				g.Expect(graphConfigMap(g, agent).ResourceVersion).To(Equal(graph.ResourceVersion))
				g.Expect(workerDeployment(g, agent).ResourceVersion).To(Equal(deployment.ResourceVersion))
			}).Should(Succeed())
		})
	})
})

// rotateSecret gives one key of a Secret a new value.
func rotateSecret(ns, name, key, value string) {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, secret)).To(Succeed())
	secret.Data[key] = []byte(value)
	Expect(k8sClient.Update(suiteCtx, secret)).To(Succeed())
}

// replicaSetOf is a ReplicaSet of a worker Deployment's current template,
// labeled with an engine version, as the Deployment controller would make.
func replicaSetOf(d *appsv1.Deployment, suffix, engineVersion string) *appsv1.ReplicaSet {
	template := *d.Spec.Template.DeepCopy()
	template.Labels = maps.Clone(template.Labels)
	template.Labels[render.LabelEngineVersion] = engineVersion
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: d.Namespace, Name: d.Name + "-" + suffix, Labels: template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment",
				Name: d.Name, UID: d.UID, Controller: ptr.To(true)}},
		},
		Spec: appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: template},
	}
}

// graphConfigMap reads an Agent's published Flow graph.
func graphConfigMap(g Gomega, agent *agentsv1.Agent) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: agent.Namespace, Name: render.GraphConfigMapName(agent.Name)}, cm)).To(Succeed())
	return cm
}

// dumpNamespace renders every object of a namespace the operator could have
// written, with their status, as text.
func dumpNamespace(ns string) string {
	GinkgoHelper()
	out, err := kubectl("get", "--namespace", ns, "-o", "yaml",
		"agents.agents.stepwise.run,toolsources.agents.stepwise.run,mediastores.agents.stepwise.run,configmaps,deployments,serviceaccounts")
	Expect(err).NotTo(HaveOccurred(), out)
	return out
}
