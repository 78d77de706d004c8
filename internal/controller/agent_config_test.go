package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/spend"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// The Agent reconciler's worker configurations, spend limits, session Flow
// graph and references; the same Describe as agent_controller_test.go, so
// every spec keeps its full name.
var _ = Describe("Agent reconciler", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

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
})
