package controller_test

import (
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

var _ = Describe("config/samples", func() {
	It("applies with kubectl and every Agent, ToolSource and MediaStore reaches Ready", func() {
		ns := newNamespace()
		out, err := kubectl("apply", "--namespace", ns, "-f", filepath.Join("..", "..", "config", "samples"))
		Expect(err).NotTo(HaveOccurred(), out)

		var agents agentsv1.AgentList
		var toolSources agentsv1.ToolSourceList
		var mediaStores agentsv1.MediaStoreList
		for _, list := range []client.ObjectList{&agents, &toolSources, &mediaStores} {
			Expect(k8sClient.List(suiteCtx, list, client.InNamespace(ns))).To(Succeed())
		}
		Expect(agents.Items).NotTo(BeEmpty())
		Expect(toolSources.Items).NotTo(BeEmpty())
		Expect(mediaStores.Items).NotTo(BeEmpty())
		for i := range agents.Items {
			expectReady(&agents.Items[i])
		}
		for i := range toolSources.Items {
			expectReady(&toolSources.Items[i])
		}
		for i := range mediaStores.Items {
			expectReady(&mediaStores.Items[i])
		}

		out, err = kubectl("get", "--namespace", ns, "stepwise")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(And(ContainSubstring("SupportAgent"), ContainSubstring("session-media"), ContainSubstring("tickets")))
	})
})

var _ = Describe("config/default", func() {
	It("installs the operator's CRDs, RBAC and Deployment on a real API server", func() {
		out, err := kubectl("apply", "-k", filepath.Join("..", "..", "config", "default"))
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("get", "--namespace", "stepwise-system", "deployment/stepwise-controller-manager",
			"-o", "jsonpath={.spec.template.spec.serviceAccountName}")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(Equal("stepwise-controller-manager"))
		out, err = kubectl("auth", "can-i", "patch", "agents.agents.stepwise.run", "--subresource=status",
			"--as", "system:serviceaccount:stepwise-system:stepwise-controller-manager")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(HavePrefix("yes"))
	})
})
