package controller_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stepwise-run/stepwise/internal/grants"
)

var _ = Describe("Gateway grants publisher", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	published := func() (grants.Published, error) {
		var cm corev1.ConfigMap
		var doc grants.Published
		if err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: operatorNamespace, Name: gatewayGrants}, &cm); err != nil {
			return doc, err
		}
		err := json.Unmarshal([]byte(cm.Data[grants.PublishedKey]), &doc)
		return doc, err
	}
	grantOf := func(source string) func() (*grants.PublishedGrant, error) {
		return func() (*grants.PublishedGrant, error) {
			doc, err := published()
			for i := range doc.Grants {
				if doc.Grants[i].Source == source {
					return &doc.Grants[i], err
				}
			}
			return nil, err
		}
	}

	It("publishes each labeled Secret's grant by its token's digest, and follows the Secrets", func() {
		const token = "a-dashboard-token-of-the-grants-test-0123456789"
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard",
			Labels: map[string]string{grants.LabelApplicationToken: "true"}},
			StringData: map[string]string{"token": token, "verbs": "get", "agents": "support"}}
		Expect(k8sClient.Create(suiteCtx, secret)).To(Succeed())
		sum := sha256.Sum256([]byte(token))
		source := "Secret " + ns + "/dashboard"
		Eventually(grantOf(source)).Should(And(Not(BeNil()),
			HaveField("SHA256", hex.EncodeToString(sum[:])), HaveField("Namespace", ns),
			HaveField("Agents", []string{"support"}), HaveField("Verbs", []grants.Verb{grants.VerbGet})))

		By("holding no token, only its digest")
		var cm corev1.ConfigMap
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: operatorNamespace, Name: gatewayGrants}, &cm)).To(Succeed())
		Expect(cm.Data[grants.PublishedKey]).NotTo(ContainSubstring(token))

		By("publishing it again when someone deletes the ConfigMap")
		Expect(k8sClient.Delete(suiteCtx, &cm)).To(Succeed())
		Eventually(grantOf(source)).ShouldNot(BeNil())

		By("naming a broken Secret's problem and dropping the grant of a deleted one")
		broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken",
			Labels: map[string]string{grants.LabelApplicationToken: "true"}}, StringData: map[string]string{"token": "short", "verbs": "get"}}
		Expect(k8sClient.Create(suiteCtx, broken)).To(Succeed())
		Eventually(func() ([]string, error) { doc, err := published(); return doc.Problems, err }).Should(
			ContainElement(ContainSubstring("Secret " + ns + "/broken: data.token has 5 bytes")))
		Expect(k8sClient.Delete(suiteCtx, secret)).To(Succeed())
		Eventually(grantOf(source)).Should(BeNil())
	})
})
