package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
)

// What the Agent reconciler does with objects it does not own; the same
// Describe as agent_controller_test.go, so every spec keeps its full name.
var _ = Describe("Agent reconciler", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

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
