package controller_test

import (
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
		Expect(ms.Status.StoreURI).To(Equal("file:///srv/stepwise/" + ns + "/media"))

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

	It("refuses a host directory the operator does not allow, and the Agents that use it get no hostPath", func() {
		ms := mediaStoreFixture(ns, "node-media", withLocalDirectory("/data/media", ""))
		agent := agentFixture(ns, "hostpath", withMediaStore("node-media"))
		create(ms, agent)
		Eventually(conditionOf(ms, agentsv1.ConditionReady)).Should(And(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonHostPathNotAllowed),
			HaveField("ObservedGeneration", ms.Generation),
			HaveField("Message", ContainSubstring("spec.localDirectory.root: /data/media would be mounted from the node (hostPath)")),
			HaveField("Message", ContainSubstring("(the operator allows namespace "+ns+" "+mediaHostPathRoot+"/"+ns+"); use a PersistentVolumeClaim, "+
				"or ask the operator's administrator to allow this directory with --media-host-path-roots"))))
		Expect(ms.Status.ObservedGeneration).To(Equal(ms.Generation))
		Eventually(conditionOf(agent, agentsv1.ConditionReady)).Should(And(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonMediaStoreNotReady),
			HaveField("Message", ContainSubstring(`MediaStore "node-media" is not Ready (HostPathNotAllowed`))))
		Consistently(func() bool {
			err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: render.WorkerName(agent.Name)}, &appsv1.Deployment{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "an Agent on a refused store got a Deployment")

		By("mounting the claim at root, and nothing from the node, once the store names a PersistentVolumeClaim")
		Expect(change(ms, func(m *agentsv1.MediaStore) { m.Spec.LocalDirectory.PersistentVolumeClaimName = "media" })).To(Succeed())
		expectReady(ms, agent)
		pod := workerDeployment(Default, agent).Spec.Template.Spec
		Expect(pod.Volumes).To(ContainElement(And(
			HaveField("Name", "media"),
			HaveField("HostPath", BeNil()),
			HaveField("PersistentVolumeClaim.ClaimName", "media"))))
		Expect(pod.Containers[0].VolumeMounts).To(ContainElement(And(
			HaveField("Name", "media"), HaveField("MountPath", "/data/media"))))
	})

	It("mounts an allowed host directory, and only that directory, which must exist, after checking it for links", func() {
		root := mediaHostPathRoot + "/" + ns + "/team-a"
		ms := mediaStoreFixture(ns, "allowed", withLocalDirectory(root, ""))
		agent := agentFixture(ns, "allowed-hostpath", withMediaStore("allowed"))
		create(ms, agent)
		expectReady(ms, agent)
		pod := workerDeployment(Default, agent).Spec.Template.Spec
		Expect(pod.Volumes).To(ContainElement(And(
			HaveField("Name", "media"),
			HaveField("HostPath.Path", root),
			HaveField("HostPath.Type", ptr.To(corev1.HostPathDirectory)))))
		Expect(pod.Containers[0].VolumeMounts).To(ContainElement(And(
			HaveField("Name", "media"), HaveField("MountPath", root))))

		By("checking, in the pod, with the operator's own image, that no component below the namespace's directory is a link")
		Expect(pod.Volumes).To(ContainElement(And(
			HaveField("Name", "media-base"), HaveField("HostPath.Path", mediaHostPathRoot+"/"+ns))))
		Expect(pod.InitContainers).To(ConsistOf(And(
			HaveField("Name", "media-root-check"),
			HaveField("Image", stockWorkerImage),
			HaveField("Args", Equal([]string{render.MediaRootCheckCommand, "--base=/stepwise/media-base", "--store=/stepwise/media-store", "--path=team-a"})),
			HaveField("VolumeMounts", ConsistOf(
				And(HaveField("Name", "media-base"), HaveField("ReadOnly", true)),
				And(HaveField("Name", "media"), HaveField("ReadOnly", true)))))))
	})

	It("keeps each namespace to its own host directory", func() {
		other := mediaStoreFixture(ns, "another-namespaces", withLocalDirectory(mediaHostPathRoot+"/team-b/store", ""))
		create(other)
		Eventually(conditionOf(other, agentsv1.ConditionReady)).Should(And(
			haveStatusReason(metav1.ConditionFalse, agentsv1.ReasonHostPathNotAllowed),
			HaveField("Message", Not(ContainSubstring("team-b "+mediaHostPathRoot)))))
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
