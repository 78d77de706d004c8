package controller_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/media"
)

// expectRefused creates obj and expects the API server to refuse it with a
// message that contains every fragment, the field's path among them.
func expectRefused(obj client.Object, fragments ...string) {
	GinkgoHelper()
	err := k8sClient.Create(suiteCtx, obj)
	Expect(err).To(HaveOccurred(), "the API server accepted %T %s", obj, obj.GetName())
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "not a validation error: %v", err)
	for _, f := range fragments {
		Expect(err.Error()).To(ContainSubstring(f))
	}
}

var _ = Describe("API validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("accepts tracing to an OTLP/HTTP path with defaults filled", func() {
		agent := agentFixture(ns, "traced", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "https://traces.example.com:443/otlp/v1/traces", Protocol: "http/protobuf"}
		})
		Expect(k8sClient.Create(suiteCtx, agent)).To(Succeed())
		Expect(agent.Spec.Tracing.TracingEnabled()).To(BeTrue())
		Expect(*agent.Spec.Tracing.SamplePercent).To(Equal(int32(100)))
		Expect(agent.Spec.Tracing.SemanticConventions).To(Equal("1.42.0-dev"))
	})

	DescribeTable("refuses a bad Agent and names the field",
		func(mutate agentOption, fragments ...string) {
			expectRefused(agentFixture(ns, "bad", mutate), fragments...)
		},
		Entry("a Flow type that is not a name", withFlowType("1-support"), "spec.flowType", "should match"),
		Entry("an unknown provider", func(a *agentsv1.Agent) { a.Spec.Model.Provider = "gemini" },
			"spec.model.provider", "Unsupported value"),
		Entry("no model name", func(a *agentsv1.Agent) { a.Spec.Model.Name = "" }, "spec.model.name"),
		Entry("openai-compatible without a base URL", func(a *agentsv1.Agent) {
			a.Spec.Model = agentsv1.ModelSpec{Provider: agentsv1.ModelProviderOpenAICompatible, Name: "llama"}
		}, "spec.model.baseURL", "baseURL is required for provider openai-compatible"),
		Entry("a model choice on openai-compatible without a base URL", func(a *agentsv1.Agent) {
			a.Spec.ModelChoices = []agentsv1.ModelChoice{{Choice: "local", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderOpenAICompatible, Name: "llama"}}}
		}, "spec.modelChoices[0].model.baseURL", "baseURL is required for provider openai-compatible"),
		Entry("a model choice named with a space", func(a *agentsv1.Agent) {
			a.Spec.ModelChoices = []agentsv1.ModelChoice{{Choice: "big model", Model: agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}}}
		}, "spec.modelChoices[0].choice", "should match"),
		Entry("two model choices with one name", func(a *agentsv1.Agent) {
			m := agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"}
			a.Spec.ModelChoices = []agentsv1.ModelChoice{{Choice: "x", Model: m}, {Choice: "x", Model: m}}
		}, "spec.modelChoices[1]", "Duplicate value"),
		Entry("anthropic without a key", func(a *agentsv1.Agent) {
			a.Spec.Model = agentsv1.ModelSpec{Provider: agentsv1.ModelProviderAnthropic, Name: "claude"}
		}, "spec.model.apiKeySecretRef", "apiKeySecretRef is required"),
		Entry("a base URL that is not http", func(a *agentsv1.Agent) {
			a.Spec.Model = agentsv1.ModelSpec{Provider: agentsv1.ModelProviderOpenAICompatible, Name: "llama", BaseURL: "ftp://models"}
		}, "spec.model.baseURL", "should match"),
		Entry("a scripted model with a key", func(a *agentsv1.Agent) {
			a.Spec.Model.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: "s", Key: "k"}
		}, "spec.model.provider", "a scripted model takes neither baseURL nor apiKeySecretRef"),
		Entry("an unknown reasoning effort", func(a *agentsv1.Agent) {
			a.Spec.Model.Settings = &agentsv1.ModelSettings{ReasoningEffort: "extreme"}
		}, "spec.model.settings.reasoningEffort", "Unsupported value"),
		Entry("an unknown tool effect", func(a *agentsv1.Agent) {
			a.Spec.ToolPolicies = []agentsv1.ToolPolicy{{Name: "refund", Effect: "maybe"}}
		}, "spec.toolPolicies[0].effect", "Unsupported value"),
		Entry("a tool name a model cannot call", func(a *agentsv1.Agent) {
			a.Spec.ToolPolicies = []agentsv1.ToolPolicy{{Name: "refund order", Effect: agentsv1.ToolEffectRead}}
		}, "spec.toolPolicies[0].name", "should match"),
		Entry("a policy for an enabled built-in tool", func(a *agentsv1.Agent) {
			a.Spec.BuiltInTools = []agentsv1.BuiltInTool{agentsv1.BuiltInToolAskUser}
			a.Spec.ToolPolicies = []agentsv1.ToolPolicy{{Name: "ask_user", Effect: agentsv1.ToolEffectRead}}
		}, "spec.toolPolicies", "may not name an enabled built-in tool"),
		Entry("an unknown built-in tool", func(a *agentsv1.Agent) {
			a.Spec.BuiltInTools = []agentsv1.BuiltInTool{"web_search"}
		}, "spec.builtInTools[0]", "Unsupported value"),
		Entry("plan mode without write_todos", func(a *agentsv1.Agent) {
			a.Spec.BuiltInTools = []agentsv1.BuiltInTool{agentsv1.BuiltInToolAskUser}
			a.Spec.PlanMode = &agentsv1.PlanModeSpec{Enabled: true}
		}, "spec.planMode.enabled", "planMode.enabled requires write_todos in builtInTools"),
		Entry("a trigger ratio of 1", func(a *agentsv1.Agent) {
			a.Spec.Compaction = &agentsv1.CompactionSpec{ContextWindowTokens: 100_000, TriggerRatio: 1}
		}, "spec.compaction.triggerRatio", "should be less than 1"),
		Entry("a keep ratio above the trigger", func(a *agentsv1.Agent) {
			a.Spec.Compaction = &agentsv1.CompactionSpec{ContextWindowTokens: 100_000, TriggerRatio: 0.5, KeepRatio: 0.6}
		}, "spec.compaction.keepRatio", "keepRatio must be less than triggerRatio"),
		Entry("a tiny context window", func(a *agentsv1.Agent) {
			a.Spec.Compaction = &agentsv1.CompactionSpec{ContextWindowTokens: 10}
		}, "spec.compaction.contextWindowTokens", "should be greater than or equal to 1024"),
		Entry("zero model calls per turn", func(a *agentsv1.Agent) {
			a.Spec.Limits = &agentsv1.LimitsSpec{MaxModelCallsPerTurn: -1}
		}, "spec.limits.maxModelCallsPerTurn", "should be greater than or equal to 1"),
		Entry("an interrupt deadline under a second", func(a *agentsv1.Agent) {
			a.Spec.Limits = &agentsv1.LimitsSpec{InterruptDeadline: &metav1.Duration{Duration: 500_000_000}}
		}, "spec.limits.interruptDeadline", "interruptDeadline must be at least 1s"),
		Entry("an event stream smaller than 64Ki", func(a *agentsv1.Agent) {
			a.Spec.Limits = &agentsv1.LimitsSpec{EventStreamCapacity: ptr.To(resource.MustParse("1Ki"))}
		}, "spec.limits.eventStreamCapacity", "eventStreamCapacity must be between 64Ki and 1Gi"),
		Entry("a spend limit with no budget", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{}
		}, "spec.spendLimit", "a spendLimit needs an agent or a session budget"),
		Entry("an agent budget with neither tokens nor cost", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Agent: &agentsv1.AgentBudget{}}
		}, "spec.spendLimit.agent", "an agent budget needs tokens or cost"),
		Entry("a spend window under a minute", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Window: &metav1.Duration{Duration: time.Second},
				Session: &agentsv1.SessionBudget{Tokens: 10}}
		}, "spec.spendLimit.window", "window must be between 1m and 8784h"),
		Entry("a negative cost budget", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Agent: &agentsv1.AgentBudget{Cost: ptr.To("-5")}}
		}, "spec.spendLimit.agent.cost", "should match"),
		Entry("a cost budget of zero", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Agent: &agentsv1.AgentBudget{Cost: ptr.To("0.00")},
				Prices: []agentsv1.ModelPrice{{Model: "demo", InputPerMillion: "1", OutputPerMillion: "2"}}}
		}, "spec.spendLimit.agent.cost", "cost must be more than 0"),
		Entry("a cost budget without a price for the model", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Agent: &agentsv1.AgentBudget{Cost: ptr.To("5")},
				Prices: []agentsv1.ModelPrice{{Model: "other", InputPerMillion: "1", OutputPerMillion: "2"}}}
		}, "spec.spendLimit.prices", "a cost budget needs a price for spec.model and every model choice"),
		Entry("a price that is not a decimal", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Session: &agentsv1.SessionBudget{Tokens: 10},
				Prices: []agentsv1.ModelPrice{{Model: "demo", InputPerMillion: "2e4", OutputPerMillion: "2"}}}
		}, "spec.spendLimit.prices[0].inputPerMillion", "should match"),
		Entry("a session budget of no tokens", func(a *agentsv1.Agent) {
			a.Spec.SpendLimit = &agentsv1.SpendLimitSpec{Session: &agentsv1.SessionBudget{Tokens: 0}}
		}, "spec.spendLimit.session.tokens", "should be greater than or equal to 1"),
		Entry("a tracing endpoint with credentials", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "http://user:secret@collector:4317"}
		}, "spec.tracing.endpoint", "should match"),
		Entry("a tracing endpoint that is not http", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "file:///var/run/otel.sock"}
		}, "spec.tracing.endpoint", "should match"),
		Entry("a gRPC tracing endpoint with a path", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "http://collector:4317/v1/traces"}
		}, "spec.tracing.endpoint", "an endpoint may carry a path only with protocol http/protobuf"),
		Entry("a tracing CA without an https endpoint", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{Endpoint: "http://collector:4317", CASecretRef: &agentsv1.SecretKeyReference{Name: "ca", Key: "ca.crt"}}
		}, "spec.tracing.caSecretRef", "a caSecretRef needs an https:// endpoint"),
		Entry("a sample percent over 100", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{SamplePercent: ptr.To(int32(101))}
		}, "spec.tracing.samplePercent", "should be less than or equal to 100"),
		Entry("unknown semantic conventions", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{SemanticConventions: "1.0.0"}
		}, "spec.tracing.semanticConventions", "Unsupported value"),
		Entry("a tracing header that is not a token", func(a *agentsv1.Agent) {
			a.Spec.Tracing = &agentsv1.TracingSpec{Headers: []agentsv1.HTTPHeader{{Name: "X Key", Value: ptr.To("v")}}}
		}, "spec.tracing.headers[0].name", "should match"),
		Entry("an engine address without a port", withEngine("temporal.example.com", "default"),
			"spec.engine.address", "should match"),
		Entry("an engine address with a gRPC scheme", withEngine("dns:temporal.example.com:7233", "default"),
			"spec.engine.address", "should match"),
		Entry("an engine port out of range", withEngine("temporal.example.com:72330", "default"),
			"spec.engine.address", "address must end in a port from 1 to 65535"),
		Entry("an engine API key without TLS", func(a *agentsv1.Agent) {
			a.Spec.Engine = &agentsv1.EngineSpec{Address: "temporal:7233",
				APIKeySecretRef: &agentsv1.SecretKeyReference{Name: "temporal", Key: "api-key"}}
		}, "spec.engine.tls", "tls is required with apiKeySecretRef"),
		Entry("an engine and a ClusterEngine together", func(a *agentsv1.Agent) {
			withEngine("temporal:7233", "default")(a)
			withEngineRef("shared")(a)
		}, "spec.engineRef", "engine and engineRef are exclusive"),
		Entry("a ClusterEngine name that names nothing", withEngineRef("Not_A_Name"), "spec.engineRef.name", "should match"),
		Entry("a worker image without its engine version", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Image: "registry.example.com/support-worker:1.4"}
		}, "spec.workers.engineVersion", "image and engineVersion are set together"),
		Entry("an engine version that is not a version", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Image: "worker:1", EngineVersion: "latest"}
		}, "spec.workers.engineVersion", "should match"),
		Entry("an engine version that cannot label a pod", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Image: "worker:1", EngineVersion: "1.0.0-rc-"}
		}, "spec.workers.engineVersion", "should match"),
		Entry("an engine version with build metadata", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Image: "worker:1", EngineVersion: "1.0.0+build.5"}
		}, "spec.workers.engineVersion", "should match"),
		Entry("a service account name that is not a name", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{ServiceAccountName: "Cloud_Identity"}
		}, "spec.workers.serviceAccountName", "should match"),
		Entry("dynamic resource claims", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}
		}, "spec.workers.resources", "resources.claims is not supported for workers"),
		Entry("negative replicas", withReplicas(-1), "spec.workers.replicas", "should be greater than or equal to 0"),
		Entry("more replicas than an engine should carry", withReplicas(1001), "spec.workers.replicas", "should be less than or equal to 1000"),
		Entry("zero task slots", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{TaskSlots: -5}
		}, "spec.workers.taskSlots", "should be greater than or equal to 1"),
		Entry("a reserved environment variable", func(a *agentsv1.Agent) {
			a.Spec.Workers = &agentsv1.WorkersSpec{Env: []corev1.EnvVar{{Name: "STEPWISE_POD_NAME", Value: "x"}}}
		}, "spec.workers.env", "env names starting with STEPWISE_ are reserved"),
		Entry("a name too long for the objects it owns", func(a *agentsv1.Agent) {
			a.Name = strings.Repeat("a", 50)
		}, "metadata.name must be a DNS label of at most 49 characters"),
	)

	It("refuses zero model calls per turn and zero task slots written in YAML", func() {
		manifest := filepath.Join(GinkgoT().TempDir(), "agent.yaml")
		Expect(os.WriteFile(manifest, []byte(`apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata:
  name: zeros
spec:
  flowType: ZeroAgent
  model: {provider: scripted, name: demo}
  limits: {maxModelCallsPerTurn: 0}
  workers: {taskSlots: 0}
`), 0o600)).To(Succeed())
		out, err := kubectl("apply", "--namespace", ns, "-f", manifest)
		Expect(err).To(HaveOccurred())
		Expect(out).To(And(
			ContainSubstring("spec.limits.maxModelCallsPerTurn"),
			ContainSubstring("spec.workers.taskSlots"),
			ContainSubstring("should be greater than or equal to 1")))
	})

	It("refuses a change of flowType", func() {
		agent := agentFixture(ns, "fixed", withFlowType("FixedAgent"))
		create(agent)
		err := change(agent, func(a *agentsv1.Agent) { a.Spec.FlowType = "OtherAgent" })
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(And(ContainSubstring("spec.flowType"), ContainSubstring("flowType is immutable")))
	})

	It("fills the documented defaults", func() {
		agent := agentFixture(ns, "defaults", func(a *agentsv1.Agent) {
			a.Spec.Compaction = &agentsv1.CompactionSpec{ContextWindowTokens: 200_000}
		})
		create(agent)
		Expect(agent.Spec.DefaultToolEffect).To(Equal(agentsv1.ToolEffectUnclassified))
		Expect(agent.Spec.Compaction.TriggerRatio).To(Equal(0.85))
		Expect(agent.Spec.Compaction.KeepRatio).To(Equal(0.3))
		Expect(*agent.Spec.Compaction.RetainedMessageLimit).To(Equal(int32(1000)))
		Expect(agent.Spec.Limits.MaxModelCallsPerTurn).To(Equal(int32(100)))
		Expect(agent.Spec.Limits.MaxDurableWait.Duration.Hours()).To(Equal(8760.0))
		Expect(agent.Spec.Limits.EventStreamCapacity.Value()).To(Equal(int64(10 << 20)))
		Expect(*agent.Spec.Workers.Replicas).To(Equal(int32(1)))
		Expect(agent.Spec.Workers.TaskSlots).To(Equal(int32(100)))

		ts := toolSourceFixture(ns, "defaults")
		create(ts)
		Expect(*ts.Spec.TrustToolAnnotations).To(BeFalse())
		Expect(ts.Spec.ListingTTL.Duration.Minutes()).To(Equal(5.0))
		Expect(ts.Spec.ConnectionTimeout.Duration.Seconds()).To(Equal(30.0))
		Expect(ts.Spec.RequestTimeout.Duration.Minutes()).To(Equal(10.0))
		Expect(ts.Spec.TaskWaitTimeout.Duration.Minutes()).To(Equal(10.0))
	})

	DescribeTable("refuses a bad ToolSource and names the field",
		func(name string, mutate toolSourceOption, fragments ...string) {
			expectRefused(toolSourceFixture(ns, name, mutate), fragments...)
		},
		Entry("two transports", "both", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP.StreamableHTTP = &agentsv1.MCPStreamableHTTP{URL: "https://mcp.example.com"}
		}, "spec.mcp", "exactly one of stdio or streamableHTTP must be set"),
		Entry("no transport", "neither", func(ts *agentsv1.ToolSource) { ts.Spec.MCP = agentsv1.MCPServer{} },
			"spec.mcp", "exactly one of stdio or streamableHTTP must be set"),
		Entry("a URL that is not http", "ftp", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "ftp://mcp.example.com"}}
		}, "spec.mcp.streamableHTTP.url", "should match"),
		Entry("a header with a value and a Secret", "header", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "https://mcp.example.com",
				Headers: []agentsv1.HTTPHeader{{Name: "Authorization", Value: ptr.To("Bearer x"),
					ValueFrom: &agentsv1.SecretValueSource{SecretKeyRef: agentsv1.SecretKeyReference{Name: "s", Key: "k"}}}}}}
		}, "spec.mcp.streamableHTTP.headers[0]", "exactly one of value or valueFrom must be set"),
		Entry("an environment variable without a value", "env", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP.Stdio.Env = []agentsv1.ValueVar{{Name: "TOKEN"}}
		}, "spec.mcp.stdio.env[0]", "exactly one of value or valueFrom must be set"),
		Entry("a source name with a dot", "dotted", withSourceName("my.tools"), "spec.sourceName", "should match"),
		Entry("a source name that blurs tool names", "blurred", withSourceName("crm__v2"),
			"spec.sourceName", "sourceName may not contain '__'"),
		Entry("a header twice in different case", "twice", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "https://mcp.example.com",
				Headers: []agentsv1.HTTPHeader{{Name: "Authorization", Value: ptr.To("a")}, {Name: "authorization", Value: ptr.To("b")}}}}
		}, "spec.mcp.streamableHTTP.headers", "header names must be unique regardless of case"),
		Entry("a name that cannot be a source name, and no sourceName", "my.tools", func(*agentsv1.ToolSource) {},
			"spec.sourceName is required when metadata.name is not a valid source name"),
		Entry("a listing TTL of zero", "ttl", func(ts *agentsv1.ToolSource) {
			ts.Spec.ListingTTL = &metav1.Duration{}
		}, "spec.listingTTL", "listingTTL must be between 1s and 24h"),
		Entry("a task wait of two days", "taskwait", func(ts *agentsv1.ToolSource) {
			ts.Spec.TaskWaitTimeout = &metav1.Duration{Duration: 48 * time.Hour}
		}, "spec.taskWaitTimeout", "taskWaitTimeout must be between 1s and 24h"),
		Entry("a header value with CR and LF", "crlf", withHeader("X-Team", "support\r\nX-Injected: 1"),
			"spec.mcp.streamableHTTP.headers[0].value", "value may not contain control characters such as CR or LF"),
		Entry("a header value with a NUL byte", "nul", withHeader("X-Team", "support\x00"),
			"spec.mcp.streamableHTTP.headers[0].value", "value may not contain control characters"),
		Entry("a header name that is not an HTTP token", "token", withHeader("X Team", "support"),
			"spec.mcp.streamableHTTP.headers[0].name", "should match"),
		Entry("a header name with a colon", "colon", withHeader("X-Team:", "support"),
			"spec.mcp.streamableHTTP.headers[0].name", "should match"),
		Entry("a URL without a host", "nohost", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP = agentsv1.MCPServer{StreamableHTTP: &agentsv1.MCPStreamableHTTP{URL: "http:///mcp"}}
		}, "spec.mcp.streamableHTTP.url", "url must be an http or https URL with a host"),
		Entry("a stdio command of only spaces", "spaces", func(ts *agentsv1.ToolSource) { ts.Spec.MCP.Stdio.Command = "   " },
			"spec.mcp.stdio.command", "command may not start or end with whitespace"),
		Entry("a stdio command with a trailing space", "trailing", func(ts *agentsv1.ToolSource) { ts.Spec.MCP.Stdio.Command = "mcp-server " },
			"spec.mcp.stdio.command", "command may not start or end with whitespace"),
		Entry("a stdio command with a line break", "linebreak", func(ts *agentsv1.ToolSource) { ts.Spec.MCP.Stdio.Command = "mcp\nserver" },
			"spec.mcp.stdio.command", "command may not contain control characters"),
		Entry("an argument with a NUL byte", "argnul", func(ts *agentsv1.ToolSource) { ts.Spec.MCP.Stdio.Args = []string{"--root", "/srv\x00"} },
			"spec.mcp.stdio.args", "args may not contain NUL characters"),
		Entry("an environment value with a NUL byte", "envnul", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP.Stdio.Env = []agentsv1.ValueVar{{Name: "ROOT", Value: ptr.To("/srv\x00")}}
		}, "spec.mcp.stdio.env[0].value", "value may not contain NUL characters"),
		Entry("an environment name with '='", "envname", func(ts *agentsv1.ToolSource) {
			ts.Spec.MCP.Stdio.Env = []agentsv1.ValueVar{{Name: "A=B", Value: ptr.To("x")}}
		}, "spec.mcp.stdio.env[0].name", "should match"),
	)

	It("refuses a change to the source name, or adding one", func() {
		named := toolSourceFixture(ns, "named", withSourceName("crm"))
		unnamed := toolSourceFixture(ns, "unnamed")
		create(named, unnamed)
		err := change(named, func(ts *agentsv1.ToolSource) { ts.Spec.SourceName = "sales" })
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.sourceName"), ContainSubstring("sourceName is immutable")))
		err = change(unnamed, func(ts *agentsv1.ToolSource) { ts.Spec.SourceName = "later" })
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.sourceName"), ContainSubstring("sourceName cannot be added or removed")))
	})

	DescribeTable("refuses a bad ClusterEngine and names the field",
		func(mutate func(*agentsv1.ClusterEngine), fragments ...string) {
			engineCount++
			ce := clusterEngineFixture(fmt.Sprintf("bad-%d", engineCount), "temporal.example.com:7233", "agents")
			mutate(ce)
			expectRefused(ce, fragments...)
		},
		Entry("no namespace selector", func(ce *agentsv1.ClusterEngine) { ce.Spec.NamespaceSelector = nil },
			"spec.namespaceSelector", "Required value"),
		Entry("an address without a port", func(ce *agentsv1.ClusterEngine) { ce.Spec.Address = "temporal.example.com" },
			"spec.address", "should match"),
		Entry("a port out of range", func(ce *agentsv1.ClusterEngine) { ce.Spec.Address = "temporal.example.com:70000" },
			"spec.address", "address must end in a port from 1 to 65535"),
		Entry("an API key without TLS", func(ce *agentsv1.ClusterEngine) {
			ce.Spec.APIKeySecretRef = &agentsv1.SecretKeyReference{Name: "key", Key: "api-key"}
		}, "spec.tls", "tls is required with apiKeySecretRef"),
		Entry("a Temporal namespace that is not one", func(ce *agentsv1.ClusterEngine) { ce.Spec.Namespace = "a/b" },
			"spec.namespace", "should match"),
	)

	DescribeTable("refuses a bad MediaStore and names the field",
		func(mutate mediaStoreOption, fragments ...string) {
			expectRefused(mediaStoreFixture(ns, "bad", mutate), fragments...)
		},
		Entry("two locations", func(ms *agentsv1.MediaStore) {
			ms.Spec.S3 = &agentsv1.S3MediaStore{Bucket: "media"}
		}, "spec", "exactly one of s3 or localDirectory must be set"),
		Entry("a relative root", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "media" },
			"spec.localDirectory.root", "should match"),
		Entry("a root with a '..' segment", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/srv/../etc" },
			"spec.localDirectory.root", "root must be a clean absolute path"),
		Entry("a root with an empty segment", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/srv//media" },
			"spec.localDirectory.root", "root must be a clean absolute path"),
		Entry("a root with a '.' segment", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/srv/./media" },
			"spec.localDirectory.root", "root must be a clean absolute path"),
		Entry("a root that ends in '.'", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/srv/media/." },
			"spec.localDirectory.root", "root must be a clean absolute path"),
		Entry("a root with a trailing slash", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/srv/media/" },
			"spec.localDirectory.root", "should match"),
		Entry("a root with a line break", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/srv/media\n/etc" },
			"spec.localDirectory.root", "root must be a clean absolute path"),
		Entry("the whole file system", func(ms *agentsv1.MediaStore) { ms.Spec.LocalDirectory.Root = "/" },
			"spec.localDirectory.root", "should be at least 2 chars long"),
		Entry("a persistent volume claim name that is not a name", func(ms *agentsv1.MediaStore) {
			ms.Spec.LocalDirectory.PersistentVolumeClaimName = "Media_Claim"
		}, "spec.localDirectory.persistentVolumeClaimName", "should match"),
		Entry("a bucket name with '..'", func(ms *agentsv1.MediaStore) {
			ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "agent..media"}}
		}, "spec.s3.bucket", "no '..' and not an IP address"),
		Entry("a bucket name that is an IP address", func(ms *agentsv1.MediaStore) {
			ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "192.168.0.1"}}
		}, "spec.s3.bucket", "no '..' and not an IP address"),
		Entry("a name too long to label the workers that use it", func(ms *agentsv1.MediaStore) {
			ms.Name = strings.Repeat("m", 64)
		}, "metadata.name must be at most 63 characters"),
		Entry("a bucket name S3 refuses", func(ms *agentsv1.MediaStore) {
			ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "Agent_Media"}}
		}, "spec.s3.bucket", "should match"),
		Entry("a prefix with a leading slash", func(ms *agentsv1.MediaStore) {
			ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "media", Prefix: "/sessions"}}
		}, "spec.s3.prefix", "should match"),
	)

	Describe("local directory roots", func() {
		local := func(root, claim string) *agentsv1.MediaStore {
			return mediaStoreFixture(ns, "", func(ms *agentsv1.MediaStore) {
				ms.GenerateName = "local-"
				ms.Spec.LocalDirectory = &agentsv1.LocalDirectoryMediaStore{Root: root, PersistentVolumeClaimName: claim}
			})
		}

		It("refuses every system directory and anything under it, with a claim or without", func() {
			dirs := append(slices.Clone(media.SystemDirectories), "/lib", "/lib64", "/libx32", "/libexec")
			for _, dir := range dirs {
				for _, root := range []string{dir, dir + "/stepwise/media"} {
					Expect(media.IsSystemPath(root)).To(BeTrue(), "the operator's own list and the API's must agree on %s", root)
					expectRefused(local(root, ""), "spec.localDirectory.root", "root may not be a system directory or lie under one")
					expectRefused(local(root, "media"), "spec.localDirectory.root", "root may not be a system directory or lie under one")
				}
			}
			for _, root := range []string{"/etc", "/proc", "/root", "/var/lib/kubelet", "/usr/bin", "/var/run", "/run/containerd", "/var/lib/docker"} {
				expectRefused(local(root, ""), "spec.localDirectory.root", "worker pods mount the store read-write at root")
			}
		})

		It("accepts a directory outside them", func() {
			for _, root := range []string{"/srv/stepwise/media", "/data/media", "/mnt/images", "/etcetera", "/srv/var/media", "/variable"} {
				Expect(media.IsSystemPath(root)).To(BeFalse(), root)
				Expect(k8sClient.Create(suiteCtx, local(root, ""))).To(Succeed(), root)
			}
		})
	})

	Describe("image URI length", func() {
		// longest finds, by adding one unit at a time, the longest value the
		// URI rule allows; the API server must accept it and refuse one more.
		longest := func(unit string, fits func(string) bool) string {
			v := ""
			for fits(v + unit) {
				v += unit
			}
			return v
		}
		s3 := func(prefix string) *agentsv1.MediaStore {
			return mediaStoreFixture(ns, "", func(ms *agentsv1.MediaStore) {
				ms.GenerateName = "s3-"
				ms.Spec = agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "agent-media", Prefix: prefix}}
			})
		}
		local := func(root string) *agentsv1.MediaStore {
			return mediaStoreFixture(ns, "", func(ms *agentsv1.MediaStore) {
				ms.GenerateName = "local-"
				ms.Spec.LocalDirectory.Root = root
			})
		}

		DescribeTable("accepts a bucket and prefix up to 1024 bytes of URI and refuses one byte more",
			func(unit string) {
				prefix := "p" + longest(unit, func(p string) bool {
					return media.ImageURILength(media.S3StoreURI("agent-media", "p"+p)) <= media.MaxImageURILength
				})
				Expect(k8sClient.Create(suiteCtx, s3(prefix))).To(Succeed())
				expectRefused(s3(prefix+unit), "spec.s3.prefix", "longer than 1024 bytes")
			},
			Entry("ASCII", "a"),
			Entry("two-byte UTF-8", "é"),
			Entry("three-byte UTF-8", "€"),
			Entry("four-byte UTF-8", "😀"),
		)

		DescribeTable("accepts a local root up to 1024 bytes of percent-encoded URI and refuses more",
			func(unit string) {
				root := "/m" + longest(unit, func(r string) bool {
					return media.ImageURILength(media.LocalStoreURI("/m"+r)) <= media.MaxImageURILength
				})
				Expect(k8sClient.Create(suiteCtx, local(root))).To(Succeed())
				expectRefused(local(root+unit), "spec.localDirectory.root", "longer than 1024 bytes")
			},
			Entry("unreserved ASCII", "a"),
			Entry("ASCII that is percent-encoded", " "),
			Entry("two-byte UTF-8", "é"),
			Entry("three-byte UTF-8", "€"),
			Entry("four-byte UTF-8", "😀"),
		)
	})
})
