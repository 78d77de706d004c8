package charts_test

import (
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/stepwise-run/stepwise/internal/media"
)

func TestBadValuesAreRefusedNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		// wantErr are parts of Helm's message: the field's path and why.
		wantErr []string
	}{
		{"no replicas", "replicas: 0", []string{"'/replicas'", "minimum"}},
		{"fractional replicas", "replicas: 1.5", []string{"'/replicas'", "integer"}},
		{"unknown key", "replica: 2", []string{"additional properties 'replica' not allowed"}},
		{"unknown nested key", "engine: {host: 'temporal:7233'}", []string{"'/engine'", "additional properties 'host' not allowed"}},
		{"engine address without port", "engine: {address: temporal.example.com}", []string{"'/engine/address'", "does not match pattern"}},
		{"engine address with empty port", "engine: {address: 'temporal:'}", []string{"'/engine/address'"}},
		{"engine address port out of range", "engine: {address: 'temporal:70000'}", []string{"'/engine/address'"}},
		{"engine address with scheme", "engine: {address: 'http://temporal:7233'}", []string{"'/engine/address'"}},
		{"engine address IPv6 unbracketed", "engine: {address: '::1:7233'}", []string{"'/engine/address'"}},
		{"empty engine namespace", "engine: {address: 'temporal:7233', namespace: ''}", []string{"'/engine/namespace'"}},
		{"API key without key", "engine: {address: 'temporal:7233', tls: {enabled: true}, apiKeySecret: creds}", []string{"'/engine/apiKeySecret'"}},
		{"API key without TLS", "engine: {address: 'temporal:7233', apiKeySecret: creds/key}", []string{"'/engine/tls/enabled'", "true"}},
		{"TLS secret without TLS", "engine: {address: 'temporal:7233', tls: {secret: ca}}", []string{"'/engine/tls/enabled'", "true"}},
		{"TLS without an engine", "engine: {tls: {enabled: true}}", []string{"'/engine/tls/enabled'", "false"}},
		{"TLS secret not a name", "engine: {address: 'temporal:7233', tls: {enabled: true, secret: Bad_Name}}", []string{"'/engine/tls/secret'"}},
		{"pull policy", "image: {pullPolicy: Sometimes}", []string{"'/image/pullPolicy'", "IfNotPresent"}},
		{"image tag", "image: {tag: 'v1 beta'}", []string{"'/image/tag'"}},
		{"image registry with scheme", "image: {registry: 'https://ghcr.io/stepwise-run'}", []string{"'/image/registry'"}},
		{"image registry with trailing slash", "image: {registry: 'ghcr.io/stepwise-run/'}", []string{"'/image/registry'"}},
		{"worker image", "workerImage: 'Agent Worker:latest'", []string{"'/workerImage'"}},
		{"pull secret as a string", "imagePullSecrets: [registry]", []string{"'/imagePullSecrets/0'", "object"}},
		{"negative CPU", "resources: {requests: {cpu: '-1'}}", []string{"'/resources/requests/cpu'"}},
		{"negative memory number", "resources: {limits: {memory: -5}}", []string{"'/resources/limits/memory'"}},
		{"memory with a bad unit", "resources: {limits: {memory: 256MB}}", []string{"'/resources/limits/memory'"}},
		{"resource claims", "resources: {claims: [{name: gpu}]}", []string{"'/resources'", "additional properties 'claims' not allowed"}},
		{"relative host path root", "mediaHostPathRoots: [srv/media]", []string{"'/mediaHostPathRoots/0'"}},
		{"host path root with ..", "mediaHostPathRoots: [/srv/../etc]", []string{"'/mediaHostPathRoots/0'"}},
		{"host path root with a trailing slash", "mediaHostPathRoots: [/srv/media/]", []string{"'/mediaHostPathRoots/0'"}},
		{"host path root with a comma", "mediaHostPathRoots: ['/srv/a,/srv/b']", []string{"'/mediaHostPathRoots/0'"}},
		{"log level", "log: {level: verbose}", []string{"'/log/level'"}},
		{"log level zero", "log: {level: 0}", []string{"'/log/level'"}},
		{"log encoder", "log: {encoder: text}", []string{"'/log/encoder'"}},
		{"poller quiet period not a duration", "rollout: {pollerQuietPeriod: soon}", []string{"'/rollout/pollerQuietPeriod'"}},
		{"unknown rollout key", "rollout: {strategy: recreate}", []string{"strategy"}},
		{"metrics port as a string", "metrics: {port: '8080'}", []string{"'/metrics/port'", "integer"}},
		{"metrics port out of range", "metrics: {port: 65536}", []string{"'/metrics/port'", "maximum"}},
		{"one port for metrics and probes", "metrics: {port: 8081}", []string{"metrics.port and healthProbePort are both 8081"}},
		{"probe port zero", "healthProbePort: 0", []string{"'/healthProbePort'"}},
		{"node selector value not a string", "nodeSelector: {example.com/pool: 1}", []string{"'/nodeSelector/example.com~1pool'", "string"}},
		{"pod label too long", "podLabels: {team: " + strings.Repeat("a", 64) + "}", []string{"'/podLabels/team'"}},
		{"toleration operator", "tolerations: [{key: dedicated, operator: Maybe}]", []string{"'/tolerations/0/operator'"}},
		{"toleration unknown key", "tolerations: [{key: dedicated, efect: NoSchedule}]", []string{"'/tolerations/0'", "'efect'"}},
		{"affinity unknown key", "affinity: {nodeAfinity: {}}", []string{"'/affinity'", "'nodeAfinity'"}},
		{"affinity weight", "affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, podAffinityTerm: {topologyKey: zone}}]}}",
			[]string{"'/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/weight'"}},
		{"affinity namespace not a DNS label", "affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone, namespaces: [Temporal_NS]}]}}",
			[]string{"'/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/0/namespaces/0'"}},
		{"full name not a DNS label", "fullnameOverride: Stepwise", []string{"'/fullnameOverride'"}},
		{"priority class name", "priorityClassName: High_Priority", []string{"'/priorityClassName'"}},
		{"service account annotations not strings", "serviceAccount: {annotations: {example.com/a: {b: c}}}", []string{"'/serviceAccount/annotations/example.com~1a'"}},
		{"one port for the gateway and the hub", "gateway: {port: 8090}", []string{"gateway.port and eventHub.port are both 8090"}},
		{"gateway Service type", "gateway: {service: {type: ExternalName}}", []string{"'/gateway/service/type'"}},
		{"negative gateway replicas", "gateway: {replicas: -1}", []string{"'/gateway/replicas'"}},
		{"token audience with a comma", "gateway: {tokenAudiences: ['a,b']}", []string{"'/gateway/tokenAudiences/0'"}},
		{"hub publish keys Secret not a name", "eventHub: {publishKeysSecret: Hub_Key}", []string{"'/eventHub/publishKeysSecret'"}},
		{"hub read tokens Secret not a name", "eventHub: {readTokensSecret: Hub_Key}", []string{"'/eventHub/readTokensSecret'"}},
		{"the retired single hub key", "eventHub: {keySecret: hub-key}", []string{"keySecret"}},
		{"hub port out of range", "eventHub: {port: 0}", []string{"'/eventHub/port'"}},
		{"hub URL with a path", "eventHub: {url: 'http://hub:8090/publish'}", []string{"'/eventHub/url'"}},
		{"hub URL with a query", "eventHub: {url: 'http://hub:8090?x=1'}", []string{"'/eventHub/url'"}},
		{"hub URL with credentials", "eventHub: {url: 'http://user:pw@hub:8090'}", []string{"'/eventHub/url'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := render(t, "--values", valuesFile(t, tc.values))
			if err == nil {
				t.Fatalf("values %q rendered, want them refused:\n%s", tc.values, out)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("values %q: error does not contain %q:\n%v", tc.values, want, err)
				}
			}
		})
	}
}

// The chart refuses the same host directories the operator does, so an
// install that would stop the operator at start fails at install instead.
func TestHostPathRootsRefusedAsTheOperatorRefusesThem(t *testing.T) {
	var roots []string
	for _, dir := range media.SystemDirectories {
		roots = append(roots, dir, dir+"/stepwise")
	}
	roots = append(roots, "/", "/lib", "/lib64", "/libexec/media")
	for _, root := range roots {
		if !media.IsSystemPath(root) && root != "/" {
			t.Fatalf("%s is not a system path for the operator; fix the test", root)
		}
	}
	list, err := yaml.Marshal(map[string][]string{"mediaHostPathRoots": roots})
	if err != nil {
		t.Fatal(err)
	}
	_, err = render(t, "--values", valuesFile(t, string(list)))
	if err == nil {
		t.Fatal("system directories rendered, want them refused")
	}
	for i, root := range roots {
		if want := "'/mediaHostPathRoots/" + strconv.Itoa(i) + "'"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s is not refused (no %s in the error):\n%v", root, want, err)
		}
	}

	allowed := []string{"/srv/stepwise-media", "/varnish/media", "/mnt/lib", "/data/tmp"}
	for _, root := range allowed {
		if media.IsSystemPath(root) {
			t.Fatalf("%s is a system path for the operator; fix the test", root)
		}
	}
	out, err := render(t, "--set", "mediaHostPathRoots={"+strings.Join(allowed, ",")+"}")
	if err != nil {
		t.Fatalf("directories outside the system ones refused: %v", err)
	}
	if want := "--media-host-path-roots=" + strings.Join(allowed, ","); !strings.Contains(out, want) {
		t.Errorf("render lacks %s", want)
	}
}
