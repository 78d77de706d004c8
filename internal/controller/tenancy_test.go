package controller_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/flowclaim"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// engineID is what the suite's engine says of its default namespace, as
// the default ClusterEngine reports it.
func engineID() string {
	GinkgoHelper()
	ce := &agentsv1.ClusterEngine{}
	Eventually(func(g Gomega) string {
		g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: defaultEngine}, ce)).To(Succeed())
		return ce.Status.NamespaceID
	}).ShouldNot(BeEmpty())
	return ce.Status.NamespaceID
}

// workerConfig reads the worker configuration an Agent's Deployment names.
func workerConfig(g Gomega, d *appsv1.Deployment) workerconfig.Config {
	cm := &corev1.ConfigMap{}
	g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: d.Namespace, Name: render.ConfigMapOf(&d.Spec.Template)}, cm)).To(Succeed())
	cfg, err := workerconfig.Decode([]byte(cm.Data[workerconfig.FileName]))
	g.Expect(err).NotTo(HaveOccurred())
	return cfg
}

var engineCount int

// newClusterEngine makes a ClusterEngine of the suite's engine, reached
// at address, and waits until the operator reports it Ready.
func newClusterEngine(address, namespace string, mutate ...func(*agentsv1.ClusterEngine)) *agentsv1.ClusterEngine {
	GinkgoHelper()
	engineCount++
	ce := clusterEngineFixture(fmt.Sprintf("engine-%d", engineCount), address, namespace)
	for _, m := range mutate {
		m(ce)
	}
	create(ce)
	DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, ce) })
	return ce
}

var _ = Describe("Tenancy", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	Describe("ClusterEngines", func() {
		It("reports who the engine is, which every address of it shares", func() {
			byIP := newClusterEngine(temporal.FrontendHostPort(), "default")
			_, port, _ := strings.Cut(temporal.FrontendHostPort(), ":")
			byName := newClusterEngine("localhost:"+port, "default")
			expectReady(byIP, byName)
			Expect(byIP.Status.NamespaceID).To(Equal(engineID()))
			Expect(byName.Status.NamespaceID).To(Equal(byIP.Status.NamespaceID))
			Expect(byIP.Status.ClusterID).NotTo(BeEmpty())
			Expect(byIP.Status.ServerVersion).NotTo(BeEmpty())

			By("telling apart another Temporal namespace of the same server")
			green := newClusterEngine(temporal.FrontendHostPort(), "green")
			expectReady(green)
			Expect(green.Status.NamespaceID).NotTo(Equal(byIP.Status.NamespaceID))
		})

		It("says why an engine is not usable", func() {
			unreachable := newClusterEngine("127.0.0.1:1", "default")
			Eventually(conditionOf(unreachable, agentsv1.ConditionReady)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonEngineUnavailable))
			missingKey := newClusterEngine(temporal.FrontendHostPort(), "default", func(ce *agentsv1.ClusterEngine) {
				ce.Spec.TLS = &agentsv1.EngineTLS{}
				ce.Spec.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: "engine-key", Key: "api-key"}
			})
			Eventually(conditionOf(missingKey, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonSecretNotFound),
				HaveField("Message", ContainSubstring(`Secret "engine-key" does not exist`)),
				HaveField("Message", ContainSubstring(operatorNamespace))))

			By("keeping an Agent on it from running, with a message naming none of its Secrets")
			agent := agentFixture(ns, "waits", withEngineRef(missingKey.Name))
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonEngineNotReady),
				HaveField("Message", Not(ContainSubstring("engine-key")))))
		})

		It("lets only the namespaces it selects use it, and takes the workers and credentials of one it no longer selects", func() {
			ce := newClusterEngine(temporal.FrontendHostPort(), "default", func(ce *agentsv1.ClusterEngine) {
				ce.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"engines.example/shared": "yes"}}
			})
			expectReady(ce)
			agent := agentFixture(ns, "selected", withEngineRef(ce.Name), withReplicas(2))
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonEngineNotAllowed),
				HaveField("Message", ContainSubstring(fmt.Sprintf("does not let namespace %q use it", ns)))))

			By("applying the Agent once its namespace carries the label")
			namespace := &corev1.Namespace{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: ns}, namespace)).To(Succeed())
			Expect(change(namespace, func(n *corev1.Namespace) { n.Labels = map[string]string{"engines.example/shared": "yes"} })).To(Succeed())
			expectReady(agent)
			Expect(*workerDeployment(Default, agent).Spec.Replicas).To(Equal(int32(2)))

			By("scaling its workers to zero once the label is gone")
			Expect(change(namespace, func(n *corev1.Namespace) { n.Labels = nil })).To(Succeed())
			Eventually(func(g Gomega) int32 { return *workerDeployment(g, agent).Spec.Replicas }).Should(BeZero())
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonEngineNotAllowed))
		})

		It("runs no Agent on an engine of its namespace's own where the administrator allows none", func() {
			agent := agentFixture(ns, "own-engine", withReplicas(1), func(a *agentsv1.Agent) {
				a.Spec.Engine = &agentsv1.EngineSpec{Address: "attacker.example:7233", Namespace: "default",
					TLS: &agentsv1.EngineTLS{}, APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "victim", Key: "token"}}
			})
			create(secretFixture(ns, "victim", map[string]string{"token": "not to be sent"}), agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonEngineNotAllowed),
				HaveField("Message", ContainSubstring("--allow-namespace-engines"))))
			Consistently(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &appsv1.Deployment{}))
			}).Should(BeTrue(), "no worker receives the Secret")
		})
	})

	Describe("claims", func() {
		It("keeps the Agents of two namespaces with one Flow type on one engine apart", func() {
			a := agentFixture(ns, "support", withFlowType("TenantAgent"))
			otherNS := newNamespace()
			b := agentFixture(otherNS, "support", withFlowType("TenantAgent"))
			create(a, b)
			expectReady(a, b)
			for _, agent := range []*agentsv1.Agent{a, b} {
				d := workerDeployment(Default, agent)
				own := tenancy.Tenant(agent.Namespace, "TenantAgent")
				Expect(workerConfig(Default, d).Engine.TaskQueue).To(Equal(own.TaskQueue()))
				Expect(d.Labels).To(HaveKeyWithValue(flowclaim.LabelFlowClaim, flowclaim.Claim{EngineID: engineID(), Names: own}.Label()))
				Expect(agent.Status.TaskQueue).To(Equal(own.TaskQueue()))
			}
		})

		It("lets the first claimant in a namespace keep its workers, and names no other Agent to the other", func() {
			first := agentFixture(ns, "first", withFlowType("ClaimedAgent"))
			create(first)
			expectReady(first)
			second := agentFixture(ns, "second", withFlowType("ClaimedAgent"))
			create(second)
			Eventually(conditionOf(second, agentsv1.ConditionReady)).Should(And(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonFlowTypeConflict),
				HaveField("Message", ContainSubstring(`another Agent of this namespace already runs workers for Flow type "ClaimedAgent"`)),
				HaveField("Message", Not(ContainSubstring(ns+"/first")))))
			err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(second.Name)}, &appsv1.Deployment{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue())

			By("allowing the same Flow type on another Temporal namespace")
			green := newClusterEngine(temporal.FrontendHostPort(), "green")
			expectReady(green)
			third := agentFixture(ns, "third", withFlowType("ClaimedAgent"), withEngineRef(green.Name))
			create(third)
			expectReady(third)

			By("handing the claim over when the first claimant goes away")
			Expect(k8sClient.Delete(suiteCtx, first)).To(Succeed())
			expectReady(second)
		})

		It("counts every address of one engine as one engine", func() {
			_, port, _ := strings.Cut(temporal.FrontendHostPort(), ":")
			byName := newClusterEngine("localhost:"+port, "default")
			byIP := newClusterEngine("127.0.0.1:"+port, "default")
			expectReady(byName, byIP)
			holder := agentFixture(ns, "holder", withFlowType("SpeltAgent"), withEngineRef(byName.Name))
			create(holder)
			expectReady(holder)
			for _, ce := range []*agentsv1.ClusterEngine{byIP, {ObjectMeta: metav1.ObjectMeta{Name: defaultEngine}}} {
				respelt := agentFixture(ns, "via-"+ce.Name, withFlowType("SpeltAgent"), withEngineRef(ce.Name))
				create(respelt)
				Eventually(conditionOf(respelt, agentsv1.ConditionReady)).Should(
					haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonFlowTypeConflict), "ClusterEngine %s", ce.Name)
				err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(respelt.Name)}, &appsv1.Deployment{})
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterEngine %s got workers", ce.Name)
			}
			expectReady(holder)
		})

		It("never takes workers away from the claimant that runs them, even for an older Agent", func() {
			green := newClusterEngine(temporal.FrontendHostPort(), "green")
			blue := newClusterEngine(temporal.FrontendHostPort(), "blue")
			expectReady(green, blue)
			older := agentFixture(ns, "older", withFlowType("MovedAgent"), withEngineRef(green.Name))
			create(older)
			expectReady(older)
			holder := agentFixture(ns, "holder", withFlowType("MovedAgent"), withEngineRef(blue.Name))
			create(holder)
			expectReady(holder)

			// The older Agent moves onto the engine where the holder runs;
			// its workers keep serving the engine it left.
			Expect(change(older, func(a *agentsv1.Agent) { a.Spec.EngineRef.Name = blue.Name })).To(Succeed())
			Eventually(conditionOf(older, agentsv1.ConditionReady)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonFlowTypeConflict))
			expectReady(holder)
			Expect(*workerDeployment(Default, older).Spec.Replicas).To(Equal(int32(1)))

			By("keeping the claim with the holder while its own spec moves away and is blocked")
			Expect(change(holder, func(a *agentsv1.Agent) {
				a.Spec.EngineRef.Name = green.Name
				a.Spec.ToolSources = []agentsv1.LocalObjectReference{{Name: "not-yet"}}
			})).To(Succeed())
			Eventually(conditionOf(holder, agentsv1.ConditionReady)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotFound))
			Consistently(conditionOf(older, agentsv1.ConditionReady)).Should(
				haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonFlowTypeConflict))

			By("handing it over once the holder's workers serve the other engine")
			create(toolSourceFixture(ns, "not-yet"))
			expectReady(holder, older)
		})

		It("gives a Deployment that forges another namespace's claim, or its own, no claim", func() {
			victim := agentFixture(ns, "victim", withFlowType("ForgedAgent"), withReplicas(2))
			attackerNS := newNamespace()
			// The attacker's Agent is older than the victim's.
			attacker := agentFixture(attackerNS, "attacker", withFlowType("ForgedAgent"))
			create(attacker)
			expectReady(attacker)
			create(victim)
			expectReady(victim)
			claim := flowclaim.Claim{EngineID: engineID(), Names: tenancy.Tenant(ns, "ForgedAgent")}.Label()
			forge := func(namespace, name string, owner *agentsv1.Agent) {
				labels := map[string]string{flowclaim.LabelFlowClaim: claim, render.LabelManagedBy: render.ManagedBy, "app": name}
				create(&appsv1.Deployment{
					ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels,
						OwnerReferences: []metav1.OwnerReference{{APIVersion: agentsv1.GroupVersion.String(), Kind: "Agent",
							Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
					Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
						Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
							Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}},
				})
			}
			// From another namespace, owned by the attacker's older Agent.
			forge(attackerNS, "forged", attacker)
			// In the victim's namespace, owned by an older Agent of another
			// Flow type.
			other := agentFixture(ns, "other", withFlowType("OtherAgent"))
			create(other)
			expectReady(other)
			forge(ns, "forged", other)
			Consistently(func(g Gomega) {
				c := conditionOf(victim, agentsv1.ConditionReady)(g)
				g.Expect(c).To(haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonReconciled))
				g.Expect(*workerDeployment(g, victim).Spec.Replicas).To(Equal(int32(2)))
			}).Should(Succeed())
			expectReady(attacker)
		})
	})

	Describe("the shared names of engine 0.7.0 and earlier", func() {
		It("moves an Agent's sessions to its own names with engine 0.8.0, then gives the shared names up", func() {
			// An Agent an earlier operator ran under the shared names, as its
			// status says: it waits for its engine until that is written.
			later := clusterEngineFixture("later-engine", temporal.FrontendHostPort(), "default")
			agent := agentFixture(ns, "moving", withFlowType("MovingAgent"), withWorker("registry.example/worker:0.7.0", "0.7.0"),
				withEngineRef(later.Name))
			create(agent)
			Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonEngineNotFound))
			shared := tenancy.Shared("MovingAgent")
			agent.Status.TaskQueue = shared.TaskQueue()
			Expect(k8sClient.Status().Update(suiteCtx, agent)).To(Succeed())
			create(later)
			DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, later) })
			expectReady(agent)
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				g.Expect(agent.Status.TaskQueue).To(Equal(shared.TaskQueue()))
				g.Expect(agent.Status.SharedTaskQueue).To(Equal(shared.TaskQueue()))
			}).Should(Succeed())
			Expect(workerConfig(Default, workerDeployment(Default, agent)).Engine.TaskQueue).To(Equal(shared.TaskQueue()))

			By("giving workers of 0.7.0 of a new Agent of the same Flow type in another namespace names of its own")
			other := agentFixture(newNamespace(), "moving", withFlowType("MovingAgent"), withWorker("registry.example/worker:0.7.0", "0.7.0"))
			create(other)
			expectReady(other)
			Expect(workerConfig(Default, workerDeployment(Default, other)).Engine.TaskQueue).To(Equal(tenancy.Tenant(other.Namespace, "MovingAgent").TaskQueue()))
			testEngine.leaveShared("MovingAgent", "s1", "s2")

			By("starting workers of 0.8.0 that poll the Agent's own task queue and the shared one")
			Expect(change(agent, func(a *agentsv1.Agent) {
				a.Spec.Workers.Image, a.Spec.Workers.EngineVersion = "registry.example/worker:0.8.0", "0.8.0"
			})).To(Succeed())
			own := tenancy.Tenant(ns, "MovingAgent")
			Eventually(func(g Gomega) {
				d := workerDeployment(g, agent)
				cfg := workerConfig(g, d)
				g.Expect(cfg.Engine.TaskQueue).To(Equal(own.TaskQueue()))
				g.Expect(cfg.Engine.SharedTaskQueue).To(Equal(shared.TaskQueue()))
				g.Expect(d.Labels).To(HaveKeyWithValue(flowclaim.LabelFlowClaim, flowclaim.Claim{EngineID: engineID(), Names: own}.Label()))
				g.Expect(d.Labels).To(HaveKeyWithValue(flowclaim.LabelSharedFlowClaim, flowclaim.Claim{EngineID: engineID(), Names: shared}.Label()))
			}).Should(Succeed())

			By("waking the sessions left under the shared names, while new ones start under the Agent's own")
			d := workerDeployment(Default, agent)
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1}
			Expect(k8sClient.Status().Update(suiteCtx, d)).To(Succeed())
			wakes := func() []string { _, calls := testEngine.workerDeploymentState(shared.WorkerDeployment()); return calls }
			Eventually(wakes).Should(ContainElement("wake s1,s2"))
			Eventually(func(g Gomega) string {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				return agent.Status.TaskQueue
			}).Should(Equal(own.TaskQueue()))
			Expect(agent.Status.SharedTaskQueue).To(Equal(shared.TaskQueue()))
			Consistently(wakes).ShouldNot(ContainElement("retire"))

			By("giving the shared names up once no session is left there")
			testEngine.leaveShared("MovingAgent")
			Eventually(wakes).Should(ContainElement("retire"))
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(agent), agent)).To(Succeed())
				g.Expect(agent.Status.SharedTaskQueue).To(BeEmpty())
				g.Expect(workerConfig(g, workerDeployment(g, agent)).Engine.SharedTaskQueue).To(BeEmpty())
				g.Expect(workerDeployment(g, agent).Labels).NotTo(HaveKey(flowclaim.LabelSharedFlowClaim))
			}).Should(Succeed())
		})
	})
})
