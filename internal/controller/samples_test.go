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

		By("showing the print columns under the short names")
		out, err = kubectl("get", "--namespace", ns, "agt", "support", "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`FLOW TYPE\s+PROVIDER\s+MODEL\s+READY\s+DESIRED\s+AVAILABLE\s+REASON\s+TASK QUEUE`))
		// No kubelet runs here, so no worker is available: the column says 0.
		Expect(out).To(MatchRegexp(`support\s+SupportAgent\s+scripted\s+support-demo\s+True\s+2\s+0\s+Reconciled\s+stepwise/SupportAgent`))
		out, err = kubectl("get", "--namespace", ns, "ts", "tickets")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`tickets\s+tickets\s+https://tickets.example.com/mcp\s+True`))
		out, err = kubectl("get", "--namespace", ns, "mst", "session-media")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`session-media\s+s3://agent-media/sessions\s+True\s+True`))
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
