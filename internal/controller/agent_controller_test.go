package controller_test

import (
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/session"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/internal/tenancy"
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

	Describe("worker configurations", func() {
		It("writes a new ConfigMap per configuration and deletes those no ReplicaSet names", func() {
			agent := agentFixture(ns, "configs")
			create(agent)
			expectReady(agent)
			first := workerDeployment(Default, agent)
			firstConfig := render.ConfigMapOf(&first.Spec.Template)

			// A ReplicaSet of the first configuration still runs, as during a
			// rollout or after a rollback.
			create(replicaSetOf(first, "first", stockEngineVersion))

			Expect(change(agent, func(a *agentsv1.Agent) { a.Spec.Instructions = "second" })).To(Succeed())
			Eventually(func(g Gomega) string { return render.ConfigMapOf(&workerDeployment(g, agent).Spec.Template) }).
				ShouldNot(Equal(firstConfig))
			secondConfig := render.ConfigMapOf(&workerDeployment(Default, agent).Spec.Template)

			Expect(change(agent, func(a *agentsv1.Agent) { a.Spec.Instructions = "third" })).To(Succeed())
			Eventually(func(g Gomega) string { return render.ConfigMapOf(&workerDeployment(g, agent).Spec.Template) }).
				ShouldNot(Equal(secondConfig))
			thirdConfig := render.ConfigMapOf(&workerDeployment(Default, agent).Spec.Template)

			Eventually(func(g Gomega) []string {
				var configs corev1.ConfigMapList
				g.Expect(k8sClient.List(suiteCtx, &configs, client.InNamespace(ns), client.MatchingLabels{
					render.LabelAgent: agent.Name, render.LabelComponent: render.ComponentWorkerConfig})).To(Succeed())
				var names []string
				for _, cm := range configs.Items {
					names = append(names, cm.Name)
				}
				return names
			}).Should(ConsistOf(firstConfig, thirdConfig))
		})
	})

	Describe("spend limits", func() {
		It("renders the budget for the workers and shows the current window's spend in status", func() {
			window := 8784 * time.Hour
			agent := agentFixture(ns, "budget", func(a *agentsv1.Agent) {
				a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{
					Window: &metav1.Duration{Duration: window},
					Agent:  &agentsv1.AgentBudget{Tokens: ptr.To(int64(1000)), Cost: ptr.To("2.5")},
					Prices: []agentsv1.ModelPrice{{Model: "demo", InputPerMillion: "1", OutputPerMillion: "3.25"}},
				}
			})
			start := spend.Limits{Window: window}.WindowStart(time.Now())
			testEngine.spent(agent.Spec.FlowType, spend.Counter{WindowStart: start, Window: window,
				Spent: spend.Amount{Tokens: 900, MicroCost: 1_250_000}, Calls: 3})
			create(agent)
			expectReady(agent)

			template := workerDeployment(Default, agent).Spec.Template
			cm := &corev1.ConfigMap{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapOf(&template)}, cm)).To(Succeed())
			cfg, err := workerconfig.Decode([]byte(cm.Data[workerconfig.FileName]))
			Expect(err).NotTo(HaveOccurred())
			Expect(cfg.SpendLimit).To(Equal(&workerconfig.SpendLimit{Window: metav1.Duration{Duration: window},
				AgentTokens: 1000, AgentMicroCost: 2_500_000,
				Prices: []workerconfig.ModelPrice{{Model: "demo", InputMicroPerMillion: 1_000_000, OutputMicroPerMillion: 3_250_000}}}))

			Eventually(func(g Gomega) *agentsv1.SpendStatus {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				st := agent.Status.Spend.DeepCopy()
				if st != nil {
					st.WindowStart, st.WindowEnd = metav1.NewTime(st.WindowStart.UTC()), metav1.NewTime(st.WindowEnd.UTC())
				}
				return st
			}).Should(Equal(&agentsv1.SpendStatus{
				WindowStart: metav1.NewTime(start), WindowEnd: metav1.NewTime(start.Add(window)),
				Tokens: 900, TokenBudget: ptr.To(int64(1000)), Cost: "1.25", CostBudget: "2.5", ModelCalls: 3,
			}))

			By("reading the counter again as sessions spend, with no change on the cluster")
			testEngine.spent(agent.Spec.FlowType, spend.Counter{WindowStart: start, Window: window,
				Spent: spend.Amount{Tokens: 1010, MicroCost: 1_300_000}, Calls: 4})
			Eventually(func(g Gomega) bool {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				return agent.Status.Spend != nil && agent.Status.Spend.Reached && agent.Status.Spend.Tokens == 1010
			}).Should(BeTrue())

			By("clearing status.spend when the agent budget goes")
			Expect(change(agent, func(a *agentsv1.Agent) {
				a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Session: &agentsv1.SessionBudget{Tokens: 10}}
			})).To(Succeed())
			Eventually(func(g Gomega) *agentsv1.SpendStatus {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				return agent.Status.Spend
			}).Should(BeNil())
		})
	})

	Describe("the session Flow graph", func() {
		It("is rewritten when the engine version changes, and repaired when edited", func() {
			agent := agentFixture(ns, "graph")
			create(agent)
			expectReady(agent)
			first := agent.Status.SessionFlowGraph.Digest

			Expect(change(agent, func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{Image: "team/worker:2", EngineVersion: "0.2.0"}
			})).To(Succeed())
			expectReady(agent)
			Expect(agent.Status.SessionFlowGraph.Digest).NotTo(Equal(first))
			graph := graphConfigMap(Default, agent)
			Expect(graph.Data[render.GraphFileName]).To(ContainSubstring(`"engineVersion": "0.2.0"`))

			published := graph.Data[render.GraphFileName]
			Expect(change(graph, func(cm *corev1.ConfigMap) { cm.Data[render.GraphFileName] = "{}" })).To(Succeed())
			// Any pass of the Agent puts the published document back.
			Expect(change(agent, func(a *agentsv1.Agent) { a.Spec.Instructions = "nudge" })).To(Succeed())
			Eventually(func(g Gomega) string { return graphConfigMap(g, agent).Data[render.GraphFileName] }).Should(Equal(published))
		})
	})

	Describe("references that are missing or not ready", func() {
		It("reports a missing ToolSource, applies nothing, and recovers when it appears", func() {
			agent := agentFixture(ns, "waits", withToolSources("later"))
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotFound),
				HaveField("Message", ContainSubstring(`spec.toolSources[0]: ToolSource "later" does not exist`))))
			Expect(agent.Status.ObservedGeneration).To(Equal(agent.Generation))
			Consistently(func(g Gomega) {
				var configMaps corev1.ConfigMapList
				g.Expect(k8sClient.List(suiteCtx, &configMaps, client.InNamespace(ns), client.MatchingLabels{render.LabelAgent: agent.Name})).To(Succeed())
				g.Expect(configMaps.Items).To(BeEmpty())
				for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.ServiceAccount{}} {
					err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, obj)
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T exists", obj)
				}
			}).Should(Succeed())

			create(toolSourceFixture(ns, "later"))
			expectReady(agent)
		})

		It("reports a ToolSource whose Secret is missing as not ready", func() {
			ts := toolSourceFixture(ns, "tickets", withHeaderFromSecret("Authorization", "absent", "token"))
			agent := agentFixture(ns, "ts-secret", withToolSources("tickets"))
			create(ts, agent)
			Eventually(conditionOf(ts, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonSecretNotFound),
				HaveField("Message", ContainSubstring(`spec.mcp.streamableHTTP.headers[Authorization].valueFrom.secretKeyRef: Secret "absent" does not exist`))))
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotReady),
				HaveField("Message", ContainSubstring(`ToolSource "tickets" is not Ready (SecretNotFound`))))

			create(secretFixture(ns, "absent", map[string]string{"token": "t"}))
			expectReady(ts, agent)
		})

		It("refuses workers of an engine version the operator does not know, and applies nothing", func() {
			agent := agentFixture(ns, "future-engine", func(a *agentsv1.Agent) {
				a.Spec.Workers = &agentsv1.WorkersSpec{Image: "team/worker:9", EngineVersion: "9.0.0"}
			})
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonUnknownEngineVersion),
				HaveField("Message", ContainSubstring(`spec.workers.engineVersion "9.0.0" is not an engine version this operator knows`))))
			Consistently(func() error {
				return k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &appsv1.Deployment{})
			}, "2s").Should(Satisfy(apierrors.IsNotFound))
		})

		It("reports a ToolSource header Secret whose value no HTTP header can carry, and never the value", func() {
			create(secretFixture(ns, "tickets", map[string]string{"token": "Bearer t0ken-value\n"}))
			ts := toolSourceFixture(ns, "tickets", withHeaderFromSecret("Authorization", "tickets", "token"))
			agent := agentFixture(ns, "ts-value", withToolSources("tickets"))
			create(ts, agent)
			Eventually(conditionOf(ts, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonSecretValueInvalid),
				HaveField("ObservedGeneration", ts.Generation),
				HaveField("Message", ContainSubstring(`spec.mcp.streamableHTTP.headers[Authorization].valueFrom.secretKeyRef: `+
					`the value of key "token" in Secret "tickets" contains a control character, such as CR or LF, which an HTTP header value cannot carry`)),
				HaveField("Message", Not(ContainSubstring("t0ken-value")))))
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotReady),
				HaveField("Message", ContainSubstring(`ToolSource "tickets" is not Ready (SecretValueInvalid`)),
				HaveField("Message", Not(ContainSubstring("t0ken-value")))))
			err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &appsv1.Deployment{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue())

			secret := &corev1.Secret{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "tickets"}, secret)).To(Succeed())
			Expect(change(secret, func(s *corev1.Secret) { s.Data = map[string][]byte{"token": []byte("Bearer t0ken-value")} })).To(Succeed())
			expectReady(ts, agent)
		})

		It("reports a missing MediaStore and a Secret without the referenced key", func() {
			agent := agentFixture(ns, "media-missing", withMediaStore("nowhere"))
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonMediaStoreNotFound),
				HaveField("Message", ContainSubstring(`spec.mediaStore: MediaStore "nowhere" does not exist`))))

			keyless := agentFixture(ns, "key-missing", withOpenAIKey("openai", "api-key"))
			create(secretFixture(ns, "openai", map[string]string{"other": "x"}), keyless)
			Eventually(conditionOf(keyless, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonSecretKeyNotFound),
				HaveField("Message", ContainSubstring(`spec.model.apiKeySecretRef: Secret "openai" has no key "api-key"`))))
		})

		It("keeps the workers it applied when a reference breaks later, and still follows scaling", func() {
			create(toolSourceFixture(ns, "files"))
			agent := agentFixture(ns, "keeps", withToolSources("files"))
			create(agent)
			expectReady(agent)
			applied := configDigest(agent)(Default)

			// A half-applied change would show in the digest: the same patch
			// changes the instructions.
			Expect(change(agent, func(a *agentsv1.Agent) {
				a.Spec.Instructions = "changed with a broken reference"
				a.Spec.ToolSources = append(a.Spec.ToolSources, agentsv1.LocalObjectReference{Name: "missing"})
			})).To(Succeed())
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotFound))
			Consistently(configDigest(agent)).Should(Equal(applied))

			out, err := kubectl("scale", "--namespace", ns, "agent/keeps", "--replicas=4")
			Expect(err).NotTo(HaveOccurred(), out)
			Eventually(func(g Gomega) int32 { return *workerDeployment(g, agent).Spec.Replicas }).Should(Equal(int32(4)))
			Expect(configDigest(agent)(Default)).To(Equal(applied))
		})

		It("refuses two ToolSources with one source name", func() {
			create(toolSourceFixture(ns, "one", withSourceName("shared")), toolSourceFixture(ns, "two", withSourceName("shared")))
			agent := agentFixture(ns, "clash", withToolSources("one", "two"))
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceConflict),
				HaveField("Message", ContainSubstring(`source name "shared"`))))
		})
	})

	Describe("scaling", func() {
		It("follows kubectl scale on the Agent and reports the scale subresource", func() {
			agent := agentFixture(ns, "scaled", withReplicas(1))
			create(agent)
			expectReady(agent)

			out, err := kubectl("scale", "--namespace", ns, "agents.agents.stepwise.run/scaled", "--replicas=3")
			Expect(err).NotTo(HaveOccurred(), out)
			Eventually(func(g Gomega) int32 { return *workerDeployment(g, agent).Spec.Replicas }).Should(Equal(int32(3)))

			out, err = kubectl("get", "--namespace", ns, "--raw",
				"/apis/agents.stepwise.run/v1alpha1/namespaces/"+ns+"/agents/scaled/scale")
			Expect(err).NotTo(HaveOccurred(), out)
			var scale struct {
				Spec   struct{ Replicas int32 }
				Status struct{ Selector string }
			}
			Expect(json.Unmarshal([]byte(out), &scale)).To(Succeed())
			Expect(scale.Spec.Replicas).To(Equal(int32(3)))
			Expect(scale.Status.Selector).To(Equal(render.Selector(agent.Name)))
		})

		It("reports available workers and the worker versions live", func() {
			agent := agentFixture(ns, "live", withReplicas(2), withWorker("registry.example/worker:0.3.0", "0.3.0"))
			create(agent)
			expectReady(agent)
			deployment := workerDeployment(Default, agent)

			// No kubelet or Deployment controller runs here: write what they would.
			deployment.Status = appsv1.DeploymentStatus{
				ObservedGeneration: deployment.Generation, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2,
			}
			Expect(k8sClient.Status().Update(suiteCtx, deployment)).To(Succeed())
			current := workerOf(deployment)
			for i := range 2 {
				setPodReady(createWorkerPod(deployment, fmt.Sprintf("live-%d", i), current), true)
			}

			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				g.Expect(agent.Status.Replicas).To(Equal(int32(2)))
				g.Expect(agent.Status.ReadyReplicas).To(Equal(int32(2)))
				g.Expect(agent.Status.WorkerVersions).To(HaveLen(1))
				v := agent.Status.WorkerVersions[0]
				g.Expect(v.BuildID).To(Equal(current.BuildID()))
				g.Expect(v.EngineVersion).To(Equal("0.3.0"))
				g.Expect(v.Image).To(Equal("registry.example/worker:0.3.0"))
				g.Expect(v.State).To(Equal(agentsv1.WorkerVersionCurrent))
				g.Expect(v.Replicas).To(Equal(int32(2)))
				g.Expect(v.ReadyReplicas).To(Equal(int32(2)))
				g.Expect(agent.Status.SessionFeatures).To(Equal([]string{"sessionSettings", "steering", "plans", "orderedWrites"}))
				g.Expect(agent.Status.RolloutStrategy).To(Equal("Rolling"))
			}).Should(Succeed())
			Eventually(conditionOf(agent, agentsv1.ConditionWorkersAvailable)).Should(
				haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonDeploymentAvailable))
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonRolloutComplete))
			Eventually(conditionOf(agent, agentsv1.ConditionReconciling)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonRolloutComplete))
			Eventually(conditionOf(agent, agentsv1.ConditionStalled)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonNotStalled))
		})
	})

	Describe("rollouts", func() {
		It("rolls a new image of the same engine version in place", func() {
			agent := agentFixture(ns, "patched", withReplicas(2), withWorker("registry.example/worker:0.3.0", "0.3.0"))
			create(agent)
			expectReady(agent)
			createWorkerPod(workerDeployment(Default, agent), "patched-old", workerOf(workerDeployment(Default, agent)))

			Expect(change(agent, func(a *agentsv1.Agent) { a.Spec.Workers.Image = "registry.example/worker:0.3.0-fix" })).To(Succeed())
			Eventually(func(g Gomega) {
				d := workerDeployment(g, agent)
				g.Expect(workerOf(d).Image).To(Equal("registry.example/worker:0.3.0-fix"))
				g.Expect(*d.Spec.Replicas).To(Equal(int32(2)))
			}).Should(Succeed())
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonRollingUpdate))
		})

		It("stops every old worker, and waits until none exists or polls, before it starts an engine version they may not run beside", func() {
			agent := agentFixture(ns, "upgraded", withReplicas(2), withWorker("registry.example/worker:0.2.0", "0.2.0"))
			create(agent)
			expectReady(agent)
			before := workerDeployment(Default, agent)
			old := workerOf(before)
			var pods []*corev1.Pod
			for i := range 2 {
				pod := createWorkerPod(before, fmt.Sprintf("upgraded-old-%d", i), old)
				setPodReady(pod, true)
				pods = append(pods, pod)
			}
			Expect(change(agent, func(a *agentsv1.Agent) {
				a.Spec.Workers.Image, a.Spec.Workers.EngineVersion = "registry.example/worker:0.4.0", "0.4.0"
			})).To(Succeed())
			newWorker := rollout.Worker{EngineVersion: "0.4.0", Image: "registry.example/worker:0.4.0"}
			By("scaling the old workers to zero, keeping their template")
			Eventually(func(g Gomega) {
				d := workerDeployment(g, agent)
				g.Expect(*d.Spec.Replicas).To(BeZero())
				g.Expect(workerOf(d)).To(Equal(old))
			}).Should(Succeed())
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonWaitingForOldWorkersStopped))
			Eventually(conditionOf(agent, agentsv1.ConditionReconciling)).Should(
				haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonWaitingForOldWorkersStopped))
			Eventually(conditionOf(agent, agentsv1.ConditionWorkersAvailable)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonRolloutStoppedWorkers))
			Eventually(conditionOf(agent, agentsv1.ConditionStalled)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonNotStalled))
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				g.Expect(agent.Status.RolloutStrategy).To(Equal("StopOldFirst"))
				g.Expect(agent.Status.WorkerVersions).To(HaveLen(2))
				g.Expect(agent.Status.WorkerVersions[0].BuildID).To(Equal(newWorker.BuildID()))
				g.Expect(agent.Status.WorkerVersions[0].State).To(Equal(agentsv1.WorkerVersionPending))
				g.Expect(agent.Status.WorkerVersions[1].BuildID).To(Equal(old.BuildID()))
				g.Expect(agent.Status.WorkerVersions[1].State).To(Equal(agentsv1.WorkerVersionDraining))
				g.Expect(agent.Status.WorkerVersions[1].Replicas).To(Equal(int32(2)))
				// Features are those of the oldest version that can still take sessions.
				g.Expect(agent.Status.SessionFeatures).To(Equal([]string{"sessionSettings", "steering", "plans"}))
			}).Should(Succeed())
			By("waiting while old pods terminate")
			for _, pod := range pods {
				Expect(k8sClient.Delete(suiteCtx, pod)).To(Succeed()) // the test's finalizer keeps it terminating
			}
			Eventually(func(g Gomega) int32 {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				return agent.Status.WorkerVersions[1].TerminatingReplicas
			}).Should(Equal(int32(2)))
			Consistently(func(g Gomega) rollout.Worker { return workerOf(workerDeployment(g, agent)) }).Should(Equal(old))

			By("waiting while an old worker polled the task queue too recently")
			testEngine.set(tenancy.Tenant(ns, agent.Spec.FlowType).TaskQueue(), rollout.Poller{Identity: "1@upgraded-old-0@", TaskQueueType: "workflow", LastAccess: time.Now()})
			for _, pod := range pods {
				releasePod(pod)
			}
			Eventually(progressingMessage(agent)).Should(ContainSubstring("1@upgraded-old-0@ polled the task queue"))
			Consistently(func(g Gomega) rollout.Worker { return workerOf(workerDeployment(g, agent)) }).Should(Equal(old))

			By("starting the new workers once no old one exists or polls")
			testEngine.set(tenancy.Tenant(ns, agent.Spec.FlowType).TaskQueue())
			Eventually(func(g Gomega) {
				d := workerDeployment(g, agent)
				g.Expect(workerOf(d)).To(Equal(newWorker))
				g.Expect(*d.Spec.Replicas).To(Equal(int32(2)))
				cm := &corev1.ConfigMap{}
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapOf(&d.Spec.Template)}, cm)).To(Succeed())
			}).Should(Succeed())
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonRollingUpdate))
			// Starting the new workers is still the stop-old-first rollout.
			Expect(agent.Status.RolloutStrategy).To(Equal("StopOldFirst"))
		})

		It("rolls versions of a Worker Deployment where the engine offers it, and leaves versioning by stopping old workers first", func() {
			agent := agentFixture(ns, "versioned", withReplicas(2), withWorker("registry.example/worker:0.5.0", "0.5.0"))
			testEngine.offer(agent.Spec.FlowType)
			create(agent)
			expectReady(agent)
			a := rollout.Worker{EngineVersion: "0.5.0", Image: "registry.example/worker:0.5.0"}
			b := rollout.Worker{EngineVersion: "0.5.0", Image: "registry.example/worker:0.5.0-fix"}
			name := tenancy.Tenant(ns, agent.Spec.FlowType).WorkerDeployment()
			versionDeployment := func(g Gomega, w rollout.Worker) *appsv1.Deployment {
				d := &appsv1.Deployment{}
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.VersionedWorkerName(agent.Name, w.BuildID())}, d)).To(Succeed())
				return d
			}
			// No kubelet or Deployment controller runs here: write what they would.
			markAvailable := func(d *appsv1.Deployment) {
				GinkgoHelper()
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: *d.Spec.Replicas,
					ReadyReplicas: *d.Spec.Replicas, AvailableReplicas: *d.Spec.Replicas, UpdatedReplicas: *d.Spec.Replicas}
				Expect(k8sClient.Status().Update(suiteCtx, d)).To(Succeed())
			}
			engineCalls := func() []string { _, calls := testEngine.workerDeploymentState(name); return calls }
			versions := func(g Gomega) []agentsv1.WorkerVersion {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				return agent.Status.WorkerVersions
			}
			stateOf := func(v agentsv1.WorkerVersion) string { return v.BuildID + " " + string(v.State) }

			By("starting the first version as its own Deployment, with the worker flags")
			first := versionDeployment(Default, a)
			Expect(first.Spec.Template.Spec.Containers[0].Args).To(ContainElements(
				"--deployment-name="+name, "--build-id="+a.BuildID()))
			Expect(first.Spec.Selector.MatchLabels).To(HaveKeyWithValue(render.LabelBuildID, a.BuildID()))
			Expect(apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &appsv1.Deployment{}))).To(BeTrue())
			Eventually(func(g Gomega) string { versions(g); return agent.Status.RolloutStrategy }).Should(Equal("Versioned"))
			Consistently(engineCalls).Should(BeEmpty()) // not current before its workers are available

			By("making it current once its workers are available")
			markAvailable(first)
			Eventually(engineCalls).Should(Equal([]string{"current " + a.BuildID()}))
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonRolloutComplete))
			Eventually(func(g Gomega) []string { return mapTo(versions(g), stateOf) }).Should(Equal([]string{a.BuildID() + " Current"}))

			By("starting a new image's version beside it; /scale addresses the new one")
			Expect(change(agent, func(x *agentsv1.Agent) { x.Spec.Workers.Image = b.Image })).To(Succeed())
			Eventually(func(g Gomega) []string { return mapTo(versions(g), stateOf) }).Should(
				Equal([]string{b.BuildID() + " Ramping", a.BuildID() + " Current"}))
			out, err := kubectl("scale", "--namespace", ns, "agent", agent.Name, "--replicas=3")
			Expect(err).NotTo(HaveOccurred(), out)
			Eventually(func(g Gomega) int32 { return *versionDeployment(g, b).Spec.Replicas }).Should(Equal(int32(3)))
			Expect(*versionDeployment(Default, a).Spec.Replicas).To(Equal(int32(2)))

			By("making it current once available, and telling the old version's sessions to move")
			markAvailable(versionDeployment(Default, b))
			Eventually(engineCalls).Should(ContainElements("current "+b.BuildID(), "move "+a.BuildID()))
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionTrue, string(rollout.PhaseDraining)))
			Eventually(func(g Gomega) []string { return mapTo(versions(g), stateOf) }).Should(
				Equal([]string{b.BuildID() + " Current", a.BuildID() + " Draining"}))
			Consistently(func(g Gomega) { versionDeployment(g, a) }).Should(Succeed()) // drains first

			By("removing the drained version's Deployment, then its engine record")
			testEngine.drain(name, a.BuildID())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(first), &appsv1.Deployment{}))
			}).Should(BeTrue())
			Eventually(engineCalls).Should(ContainElement("delete " + a.BuildID()))
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonRolloutComplete))
			Eventually(func(g Gomega) []string { return mapTo(versions(g), stateOf) }).Should(Equal([]string{b.BuildID() + " Current"}))

			By("rolling back below versioning to an engine the current one may not hand sessions to: old workers stop first")
			Expect(change(agent, func(x *agentsv1.Agent) {
				x.Spec.Workers.Image, x.Spec.Workers.EngineVersion = "registry.example/worker:0.3.0", "0.3.0"
			})).To(Succeed())
			Eventually(func(g Gomega) int32 { return *versionDeployment(g, b).Spec.Replicas }).Should(BeZero())
			Eventually(func(g Gomega) string { versions(g); return agent.Status.RolloutStrategy }).Should(Equal("StopOldFirst"))
			unversioned := &appsv1.Deployment{}
			Eventually(func() error {
				return k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, unversioned)
			}).Should(Succeed())
			Expect(unversioned.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement(HavePrefix("--build-id")))

			By("giving new sessions to the unversioned workers, unpinning the stopped version's sessions, and deleting its record")
			markAvailable(unversioned)
			Eventually(engineCalls).Should(ContainElements("current ", "unpin "+b.BuildID(), "delete "+b.BuildID()))
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.VersionedWorkerName(agent.Name, b.BuildID())}, &appsv1.Deployment{}))
			}).Should(BeTrue())
			Eventually(conditionOf(agent, agentsv1.ConditionProgressing)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonRolloutComplete))
		})

		It("keeps the new workers stopped while the engine cannot say who polls", func() {
			agent := agentFixture(ns, "unreachable", withWorker("registry.example/worker:0.3.0", "0.3.0"))
			create(agent)
			expectReady(agent)
			old := workerOf(workerDeployment(Default, agent))
			testEngine.fail(tenancy.Tenant(ns, agent.Spec.FlowType).TaskQueue(), errors.New("connection refused"))
			Expect(change(agent, func(a *agentsv1.Agent) {
				a.Spec.Workers.Image, a.Spec.Workers.EngineVersion = "registry.example/worker:0.4.0", "0.4.0"
			})).To(Succeed())
			Eventually(progressingMessage(agent)).Should(
				ContainSubstring("cannot tell whether old workers still poll the task queue: connection refused"))
			Consistently(func(g Gomega) rollout.Worker { return workerOf(workerDeployment(g, agent)) }).Should(Equal(old))
		})
	})

	Describe("objects it does not own", func() {
		It("never takes over an object of the same name that belongs to something else", func() {
			foreign := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.GraphConfigMapName("billing")},
				Data:       map[string]string{"team": "data"},
			}
			create(foreign)
			agent := agentFixture(ns, "billing")
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonOwnedObjectConflict),
				HaveField("Message", ContainSubstring(`ConfigMap "billing-session-graph" exists and is not owned by this Agent`))))
			Consistently(func(g Gomega) {
				current := &corev1.ConfigMap{}
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(foreign), current)).To(Succeed())
				g.Expect(current.Data).To(Equal(foreign.Data))
				g.Expect(current.OwnerReferences).To(BeEmpty())
			}).Should(Succeed())

			By("applying once the object is gone, without any change to the Agent")
			Expect(k8sClient.Delete(suiteCtx, foreign)).To(Succeed())
			expectReady(agent)
		})

		It("never overwrites a Secret of the event hub token's name that belongs to something else", func() {
			foreign := secretFixture(ns, render.EventHubSecretName("ledger"), map[string]string{"token": "the team's own"})
			create(foreign)
			agent := agentFixture(ns, "ledger")
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonOwnedObjectConflict),
				HaveField("Message", ContainSubstring(`Secret "ledger-event-hub" exists and is not owned by this Agent`))))
			Consistently(func(g Gomega) {
				current := &corev1.Secret{}
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(foreign), current)).To(Succeed())
				g.Expect(string(current.Data["token"])).To(Equal("the team's own"))
				g.Expect(current.OwnerReferences).To(BeEmpty())
			}).Should(Succeed())
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &appsv1.Deployment{})).
				To(Satisfy(apierrors.IsNotFound))
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
