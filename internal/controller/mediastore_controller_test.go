package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

var _ = Describe("MediaStore reconciler", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("keeps a MediaStore that an Agent references until the Agent lets go of it", func() {
		ms := mediaStoreFixture(ns, "media")
		agent := agentFixture(ns, "reader", withMediaStore("media"))
		create(ms, agent)
		expectReady(ms, agent)
		Eventually(conditionOf(ms, agentsv1.ConditionInUse)).Should(And(
			haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonReferencedByAgents),
			HaveField("Message", ContainSubstring("reader"))))
		Expect(ms.Finalizers).To(ContainElement(agentsv1.MediaStoreProtectionFinalizer))
		Expect(ms.Status.StoreURI).To(Equal("file:///var/lib/stepwise/media"))

		Expect(k8sClient.Delete(suiteCtx, ms)).To(Succeed())
		Eventually(conditionOf(ms, agentsv1.ConditionInUse)).Should(And(
			haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonDeletionBlocked),
			HaveField("Message", ContainSubstring("deletion waits until no Agent uses this MediaStore")),
			HaveField("Message", ContainSubstring("reader"))))
		Consistently(func() error {
			return k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ms), &agentsv1.MediaStore{})
		}).Should(Succeed())
		Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonMediaStoreNotReady),
			HaveField("Message", ContainSubstring(`MediaStore "media" is being deleted`))))

		Expect(change(agent, func(a *agentsv1.Agent) { a.Spec.MediaStore = nil })).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ms), &agentsv1.MediaStore{}))
		}).Should(BeTrue())
		expectReady(agent)
	})

	It("keeps a MediaStore while a blocked Agent's running workers still use it", func() {
		ms := mediaStoreFixture(ns, "media")
		agent := agentFixture(ns, "moving", withMediaStore("media"))
		create(ms, agent)
		expectReady(ms, agent)

		// The Agent lets go of the store in a change that cannot be applied
		// yet, so its workers keep the configuration that names the store.
		Expect(change(agent, func(a *agentsv1.Agent) {
			a.Spec.MediaStore = nil
			a.Spec.ToolSources = []agentsv1.LocalObjectReference{{Name: "later"}}
		})).To(Succeed())
		Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonToolSourceNotFound))
		Expect(k8sClient.Delete(suiteCtx, ms)).To(Succeed())
		Eventually(conditionOf(ms, agentsv1.ConditionInUse)).Should(And(
			haveStatusReason(metav1.ConditionTrue, agentsv1.ReasonDeletionBlocked),
			HaveField("Message", ContainSubstring("moving"))))

		create(toolSourceFixture(ns, "later"))
		expectReady(agent)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ms), &agentsv1.MediaStore{}))
		}).Should(BeTrue())
	})

	It("deletes a MediaStore that no Agent references at once", func() {
		ms := mediaStoreFixture(ns, "unused")
		create(ms)
		expectReady(ms)
		Eventually(conditionOf(ms, agentsv1.ConditionInUse)).Should(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonNotReferenced))
		Expect(k8sClient.Delete(suiteCtx, ms)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ms), &agentsv1.MediaStore{}))
		}).Should(BeTrue())
	})

	It("reports S3 credentials that lack a key", func() {
		create(secretFixture(ns, "s3", map[string]string{"AWS_ACCESS_KEY_ID": "id"}))
		ms := mediaStoreFixture(ns, "bucket", withS3Credentials("agent-media", "s3"))
		create(ms)
		Eventually(conditionOf(ms, agentsv1.ConditionReady)).Should(And(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonSecretKeyNotFound),
			HaveField("Message", ContainSubstring(`spec.s3.credentialsSecretRef: Secret "s3" has no key "AWS_SECRET_ACCESS_KEY"`))))
		Expect(ms.Status.StoreURI).To(Equal("s3://agent-media"))
	})
})
