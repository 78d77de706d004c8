package controller_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	"github.com/stepwise-run/stepwise/internal/controller"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/engineadmin"
	"github.com/stepwise-run/stepwise/internal/hub"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/testtools"
	"github.com/stepwise-run/stepwise/internal/version"
)

// probe asks the suite's engine who it is, for the ClusterEngines and the
// Agents' own engines.
var probe *controller.Engines

// The operator's defaults in these tests.
const (
	// defaultEngine is the ClusterEngine of Agents that name none: the
	// suite's Temporal dev server, for every namespace.
	defaultEngine      = "default-engine"
	operatorNamespace  = "stepwise-system"
	stockWorkerImage   = "ghcr.io/stepwise-run/agent-worker:test"
	stockEngineVersion = version.EngineVersion
	// mediaHostPathRoot is the one host directory the operator allows
	// MediaStores to mount from the node.
	mediaHostPathRoot = "/srv/stepwise"
)

var (
	testEnv     *envtest.Environment
	cfg         *rest.Config
	k8sClient   client.Client
	kubeconfig  string
	suiteCtx    context.Context
	cancel      context.CancelFunc
	managerDone chan struct{}
	// operatorConfig is the operator's own identity, bound to the generated
	// role alone.
	operatorConfig *rest.Config
	// suiteManager is the running operator; tests read its cache.
	suiteManager ctrl.Manager
	// temporal is the suite's engine: ClusterEngines reach it, and the
	// operator asks it who it is.
	temporal *devserver.Server
)

// operatorDefaults are the operator-wide settings in these tests.
var operatorDefaults = render.Defaults{
	DefaultEngine:       defaultEngine,
	WorkerImage:         stockWorkerImage,
	WorkerEngineVersion: stockEngineVersion,
	MediaHostPathRoots:  []string{mediaHostPathRoot},
	EventHub:            &render.EventHub{URL: eventHubURL, Keys: func() *hub.PublishKeys { return eventHubKeys }},
	WorkerNetworkPolicy: &render.WorkerNetworkPolicy{MetricsNamespace: "monitoring"},
}

// gatewayGrants is the ConfigMap the operator publishes the gateways'
// application token grants in.
const gatewayGrants = "stepwise-gateway-grants"

// eventHubURL and eventHubKeys are the event hub the operator hands its
// workers in these tests.
const eventHubURL = "http://stepwise-event-hub.stepwise-system.svc:8090"

var eventHubKeys = func() *hub.PublishKeys {
	keys, err := hub.ParsePublishKeys([]byte("k1:an event hub key of the controller tests, 32+ bytes"))
	if err != nil {
		panic(err)
	}
	return keys
}()

func TestControllers(t *testing.T) {
	testtools.APIServer.Path(t)
	testtools.Temporal.Path(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	suiteCtx, cancel = context.WithCancel(context.Background())

	crds := []string{filepath.Join("..", "..", "config", "crd", "bases")}
	// The chart's monitors, rendered with all values, are applied too.
	if monitoring, ok := testtools.MonitoringCRDs.Lookup(); ok {
		crds = append(crds, monitoring)
	}
	testEnv = &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	scheme, err := apischeme.New()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	admin, err := testEnv.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	config, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(kubeconfig, config, 0o600)).To(Succeed())

	// The operator runs with only the ClusterRole its RBAC markers generate,
	// so every test also shows the role is enough.
	roleYAML, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(roleYAML, role)).To(Succeed())
	Expect(k8sClient.Create(suiteCtx, role)).To(Succeed())
	Expect(k8sClient.Create(suiteCtx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "stepwise-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "stepwise-operator"}},
	})).To(Succeed())
	operator, err := testEnv.AddUser(envtest.User{Name: "stepwise-operator"}, nil)
	Expect(err).NotTo(HaveOccurred())
	operatorConfig = operator.Config()

	temporal, err = devserver.Start(suiteCtx, testtools.Temporal.Path(GinkgoTB()))
	Expect(err).NotTo(HaveOccurred())
	for _, ns := range []string{"green", "blue", "staging"} {
		Expect(temporal.RegisterNamespace(suiteCtx, ns)).To(Succeed())
	}
	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	Expect(k8sClient.Create(suiteCtx, clusterEngineFixture(defaultEngine, temporal.FrontendHostPort(), "default"))).To(Succeed())
	probe = &controller.Engines{Client: engineadmin.New(logr.Discard(), engineadmin.WithCallTimeout(3*time.Second))}

	mgr, err := ctrl.NewManager(operatorConfig, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controller.Setup(suiteCtx, mgr, controller.Options{
		Defaults:        operatorDefaults,
		RecheckInterval: time.Second,
		// The engine's pollers and Worker Deployments come from the test;
		// a short quiet period keeps the rollout tests quick.
		Engines:           testEngine,
		Probe:             probe,
		OperatorNamespace: operatorNamespace,
		SharedSettle:      time.Second,
		PollerQuietPeriod: 10 * time.Second,
		VersionedRollouts: true,
		SpendRecheck:      time.Second,
		GatewayGrants:     gatewayGrants,
	})).To(Succeed())
	suiteManager = mgr
	managerDone = make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(managerDone)
		Expect(mgr.Start(suiteCtx)).To(Succeed())
	}()

	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)
})

var _ = AfterSuite(func() {
	cancel()
	if managerDone != nil {
		<-managerDone // its watches end before the API server stops
	}
	if temporal != nil {
		Expect(temporal.Stop()).To(Succeed())
	}
	if testEnv != nil {
		start := time.Now()
		Expect(testEnv.Stop()).To(Succeed())
		GinkgoWriter.Printf("the API server and etcd stopped in %s\n", time.Since(start))
	}
})

// kubectl runs the real kubectl against the test API server.
func kubectl(args ...string) (string, error) {
	path := filepath.Join(testtools.APIServer.Path(GinkgoTB()), "kubectl")
	cmd := exec.Command(path, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
