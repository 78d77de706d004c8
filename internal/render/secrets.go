package render

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// SecretKeyDigest is the SHA-256 of one Secret value the workers receive.
// Its hash, never the value, enters the config digest, so a rotated value
// rolls the workers.
type SecretKeyDigest struct {
	Secret string
	Key    string
	SHA256 string
}

// SecretUse is one place a spec takes values from a Secret: the field, the
// Secret, and the keys it must and may have.
type SecretUse struct {
	Field    string
	Secret   string
	Required []string
	Optional []string
	// ValueProblem, when set, says why a value of a required key can never
	// work where it goes (a header, an environment variable), or "".
	ValueProblem func(string) string
}

func keyUse(field string, ref *agentsv1.SecretKeyReference) []SecretUse {
	if ref == nil {
		return nil
	}
	return []SecretUse{{Field: field, Secret: ref.Name, Required: []string{ref.Key}}}
}

func checkedKeyUse(field string, ref *agentsv1.SecretKeyReference, problem func(string) string) SecretUse {
	return SecretUse{Field: field, Secret: ref.Name, Required: []string{ref.Key}, ValueProblem: problem}
}

// pemProblem says why a value holds no PEM certificate, or returns "".
func pemProblem(v string) string {
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(v)) {
		return "holds no PEM certificate"
	}
	return ""
}

// ToolSourceSecretUses lists the Secret keys a ToolSource takes values from.
// fieldPrefix starts each field, such as `ToolSource "x" ` for an Agent's
// messages.
func ToolSourceSecretUses(ts *agentsv1.ToolSource, fieldPrefix string) []SecretUse {
	var uses []SecretUse
	if s := ts.Spec.MCP.Stdio; s != nil {
		for _, v := range s.Env {
			if v.ValueFrom != nil {
				uses = append(uses, checkedKeyUse(fmt.Sprintf("%sspec.mcp.stdio.env[%s].valueFrom.secretKeyRef", fieldPrefix, v.Name),
					&v.ValueFrom.SecretKeyRef, workerconfig.EnvValueProblem))
			}
		}
	}
	if h := ts.Spec.MCP.StreamableHTTP; h != nil {
		for _, v := range h.Headers {
			if v.ValueFrom != nil {
				uses = append(uses, checkedKeyUse(fmt.Sprintf("%sspec.mcp.streamableHTTP.headers[%s].valueFrom.secretKeyRef", fieldPrefix, v.Name),
					&v.ValueFrom.SecretKeyRef, workerconfig.HeaderValueProblem))
			}
		}
	}
	return uses
}

// MediaStoreSecretUses lists the Secret keys a MediaStore takes values from.
func MediaStoreSecretUses(ms *agentsv1.MediaStore, fieldPrefix string) []SecretUse {
	if ms.Spec.S3 == nil || ms.Spec.S3.CredentialsSecretRef == nil {
		return nil
	}
	return []SecretUse{{
		Field:    fieldPrefix + "spec.s3.credentialsSecretRef",
		Secret:   ms.Spec.S3.CredentialsSecretRef.Name,
		Required: []string{S3AccessKeyIDKey, S3SecretAccessKeyKey},
		Optional: []string{S3SessionTokenKey},
	}}
}

// AgentSecretUses lists the Secret keys of the Agent's namespace it takes
// values from through its own spec: spec.engine among them. A
// ClusterEngine's Secrets are in the operator's namespace and are not
// listed.
func AgentSecretUses(agent *agentsv1.Agent) []SecretUse {
	spec := agent.Spec
	uses := keyUse("spec.model.apiKeySecretRef", spec.Model.APIKeySecretRef)
	for _, mc := range spec.ModelChoices {
		uses = append(uses, keyUse(fmt.Sprintf("spec.modelChoices[%s].model.apiKeySecretRef", mc.Choice), mc.Model.APIKeySecretRef)...)
	}
	if engine, ok := NamespaceEngine(agent); ok {
		uses = append(uses, EngineSecretUses("spec.engine", engine)...)
	}
	if t := spec.Tracing; t != nil {
		if ref := t.CASecretRef; ref != nil {
			uses = append(uses, checkedKeyUse("spec.tracing.caSecretRef", ref, pemProblem))
		}
		for _, h := range t.Headers {
			if h.ValueFrom != nil {
				uses = append(uses, checkedKeyUse(fmt.Sprintf("spec.tracing.headers[%s].valueFrom.secretKeyRef", h.Name),
					&h.ValueFrom.SecretKeyRef, workerconfig.HeaderValueProblem))
			}
		}
	}
	if spec.Workers != nil {
		for _, env := range spec.Workers.Env {
			if env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil {
				continue
			}
			sel := env.ValueFrom.SecretKeyRef
			use := SecretUse{Field: fmt.Sprintf("spec.workers.env[%s].valueFrom.secretKeyRef", env.Name), Secret: sel.Name}
			if sel.Optional != nil && *sel.Optional {
				use.Optional = []string{sel.Key}
			} else {
				use.Required = []string{sel.Key}
			}
			uses = append(uses, use)
		}
	}
	return uses
}

// allSecretUses lists every Secret key the Agent's workers receive, its
// resolved ToolSources' and MediaStore's included.
func (r *resolver) allSecretUses() []SecretUse {
	uses := AgentSecretUses(r.agent)
	for _, ts := range r.out.ToolSources {
		uses = append(uses, ToolSourceSecretUses(ts.ToolSource, fmt.Sprintf("ToolSource %q ", ts.Name))...)
	}
	if ms := r.out.MediaStore; ms != nil {
		uses = append(uses, MediaStoreSecretUses(ms, fmt.Sprintf("MediaStore %q ", ms.Name))...)
	}
	return uses
}

// CheckSecrets returns the first use whose Secret or required key is
// missing, or whose value can never work where it goes. A use with no
// required keys may name a missing Secret. Messages name the field, the
// Secret and the key, never a value.
func CheckSecrets(uses []SecretUse, secrets map[string]*corev1.Secret) *Blocker {
	for _, use := range uses {
		secret, ok := secrets[use.Secret]
		if !ok {
			if len(use.Required) == 0 {
				continue
			}
			return blocked(agentsv1.ReasonSecretNotFound, "%s: Secret %q does not exist", use.Field, use.Secret)
		}
		if operatorCopy(secret) {
			// An engine's credentials and hub tokens are copied here for
			// workers alone: referenced elsewhere, a tenant who may not read
			// them could send them to a model or tool address of its choice.
			return blocked(agentsv1.ReasonSecretValueInvalid,
				"%s: Secret %q holds credentials the operator copied for Agent %q's workers; no Agent, ToolSource or MediaStore may reference it",
				use.Field, use.Secret, secret.Labels[LabelAgent])
		}
		for _, k := range use.Required {
			value, ok := SecretValue(secret, k)
			if !ok {
				return blocked(agentsv1.ReasonSecretKeyNotFound, "%s: Secret %q has no key %q", use.Field, use.Secret, k)
			}
			if use.ValueProblem == nil {
				continue
			}
			if problem := use.ValueProblem(string(value)); problem != "" {
				return blocked(agentsv1.ReasonSecretValueInvalid, "%s: the value of key %q in Secret %q %s", use.Field, k, use.Secret, problem)
			}
		}
	}
	return nil
}

// operatorCopy reports whether the operator wrote secret for an Agent's
// workers: an engine's credentials or an event hub token.
func operatorCopy(secret *corev1.Secret) bool {
	c := secret.Labels[LabelComponent]
	return secret.Labels[LabelManagedBy] == ManagedBy && (c == componentEngineCredentials || c == componentEventHubToken)
}

func (r *resolver) secrets() *Blocker {
	uses := r.allSecretUses()
	if b := CheckSecrets(uses, r.observed.Secrets); b != nil {
		return b
	}
	digests := map[string]SecretKeyDigest{}
	if r.out.ClusterEngine != "" {
		// The copy the workers read changes with its source.
		for key, value := range r.out.EngineCredentials.secretData() {
			sum := sha256.Sum256(value)
			name := EngineSecretName(r.agent.Name)
			digests[name+"\x00"+key] = SecretKeyDigest{Secret: name, Key: key, SHA256: hex.EncodeToString(sum[:])}
		}
	}
	for _, use := range uses {
		secret := r.observed.Secrets[use.Secret]
		for _, k := range slices.Concat(use.Required, use.Optional) {
			if value, ok := SecretValue(secret, k); ok {
				sum := sha256.Sum256(value)
				digests[use.Secret+"\x00"+k] = SecretKeyDigest{Secret: use.Secret, Key: k, SHA256: hex.EncodeToString(sum[:])}
			}
		}
	}
	for _, d := range digests {
		r.out.SecretDigests = append(r.out.SecretDigests, d)
	}
	slices.SortFunc(r.out.SecretDigests, func(a, b SecretKeyDigest) int {
		return strings.Compare(a.Secret+"\x00"+a.Key, b.Secret+"\x00"+b.Key)
	})
	if ms := r.out.MediaStore; ms != nil && ms.Spec.S3 != nil && ms.Spec.S3.CredentialsSecretRef != nil {
		_, r.out.S3SessionToken = SecretValue(r.observed.Secrets[ms.Spec.S3.CredentialsSecretRef.Name], S3SessionTokenKey)
	}
	return nil
}

// SecretValue reads a key from data, or from stringData of a Secret that has
// not been through the API server, as in tests. The operator's engine
// client reads the same Secrets the same way.
func SecretValue(secret *corev1.Secret, key string) ([]byte, bool) {
	if secret == nil {
		return nil, false
	}
	if v, ok := secret.Data[key]; ok {
		return v, true
	}
	if v, ok := secret.StringData[key]; ok {
		return []byte(v), true
	}
	return nil, false
}
