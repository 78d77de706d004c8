package controller_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/testtools"
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
		Expect(out).To(MatchRegexp(`support\s+SupportAgent\s+scripted\s+support-demo\s+True\s+2\s+0\s+Reconciled\s+stepwise/` + ns + `/SupportAgent`))
		out, err = kubectl("get", "--namespace", ns, "ts", "tickets")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`tickets\s+tickets\s+https://tickets.example.com/mcp\s+True`))
		out, err = kubectl("get", "--namespace", ns, "mst", "session-media")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`session-media\s+s3://agent-media/sessions\s+True\s+True`))
	})
})

var _ = Describe("charts/stepwise", func() {
	It("installs the operator's CRDs, RBAC and Deployment on a real API server, with default and with all values", func() {
		helm := testtools.Helm.Path(GinkgoTB())
		testtools.MonitoringCRDs.Path(GinkgoTB())
		chart := filepath.Join("..", "..", "charts", "stepwise")
		for _, install := range []struct {
			namespace, account string
			values             []string
		}{
			{namespace: "stepwise-system", account: "stepwise"},
			{namespace: "stepwise-all", account: "stepwise-all", values: []string{"--values", filepath.Join(chart, "ci", "all-values.yaml")}},
		} {
			By("rendering the chart into " + install.namespace)
			render := exec.Command(helm, append([]string{"template", "stepwise", chart, "--namespace", install.namespace, "--include-crds"},
				install.values...)...)
			render.Env = append(os.Environ(), "HELM_CONFIG_HOME="+GinkgoT().TempDir(), "HELM_CACHE_HOME="+GinkgoT().TempDir())
			manifests, err := render.Output()
			Expect(err).NotTo(HaveOccurred(), "%s", errorOutput(err))
			manifestsFile := filepath.Join(GinkgoT().TempDir(), "chart.yaml")
			Expect(os.WriteFile(manifestsFile, manifests, 0o600)).To(Succeed())

			// kubectl validates strictly on the server: an unknown field fails.
			// The suite's operator runs in stepwise-system, which exists.
			if _, err := kubectl("get", "namespace", install.namespace); err != nil {
				out, err := kubectl("create", "namespace", install.namespace)
				Expect(err).NotTo(HaveOccurred(), out)
			}
			out, err := kubectl("apply", "--server-side", "--force-conflicts", "-f", manifestsFile)
			Expect(err).NotTo(HaveOccurred(), out)

			out, err = kubectl("get", "--namespace", install.namespace, "deployment/"+install.account,
				"-o", "jsonpath={.spec.template.spec.serviceAccountName}")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(Equal(install.account))
			serviceAccount := "system:serviceaccount:" + install.namespace + ":" + install.account
			for _, allowed := range [][]string{
				{"patch", "agents.agents.stepwise.run", "--subresource=status"},
				{"create", "deployments.apps", "--namespace", "team-a"},
				{"delete", "deployments.apps", "--namespace", "team-a"}, // a drained worker version's
				{"create", "secrets", "--namespace", "team-a"},          // an Agent's event hub publish token
				{"update", "leases.coordination.k8s.io", "--namespace", install.namespace},
			} {
				out, err = kubectl(append([]string{"auth", "can-i", "--as", serviceAccount}, allowed...)...)
				Expect(err).NotTo(HaveOccurred(), out)
				Expect(out).To(HavePrefix("yes"), "%v", allowed)
			}
			for _, denied := range [][]string{
				{"update", "secrets", "--namespace", "team-a"}, // the publish token is applied, never replaced whole
				{"create", "pods", "--namespace", "team-a"},
				{"delete", "pods", "--namespace", "team-a"},
				{"create", "rolebindings.rbac.authorization.k8s.io", "--namespace", "team-a"},
				{"update", "leases.coordination.k8s.io", "--namespace", "team-a"},
			} {
				out, _ = kubectl(append([]string{"auth", "can-i", "--as", serviceAccount}, denied...)...)
				Expect(out).To(HavePrefix("no"), "%v", denied)
			}
		}
	})
})

// errorOutput is what a failed command wrote to its standard error.
func errorOutput(err error) string {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return string(exitErr.Stderr)
	}
	return ""
}
