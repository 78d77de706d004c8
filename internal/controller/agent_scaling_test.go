package controller_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// The Agent reconciler's scaling and rollouts; the same Describe as
// agent_controller_test.go, so every spec keeps its full name.
var _ = Describe("Agent reconciler", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

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
})
