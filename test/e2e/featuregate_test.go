package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/devserver"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// featureGateOnTheCluster starts a pod that polls the exporter's task queue
// as a worker of engine 0.1.0, which has no steering, beside the Agent's
// 0.5.0 workers. While it polls, the client refuses to steer a session and
// names that pod and its version; once the pod is gone and the engine has
// forgotten its poller, the same request goes through to the session.
func featureGateOnTheCluster(t *testing.T) {
	const agentName = "exporter"
	agent := waitAgent(t, agentName, func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 })
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	const session = "steady-1" // idle since the versioned rollout
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old-engine-poller"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "poller", Image: image("e2e-worker"), ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{
					{Name: "E2E_OLD_ENGINE_VERSION", Value: "0.1.0"},
					{Name: "E2E_TEMPORAL_ADDRESS", Value: engineForPods},
					{Name: "E2E_TEMPORAL_NAMESPACE", Value: devserver.Namespace},
					{Name: "E2E_TASK_QUEUE", Value: agent.Status.TaskQueue},
				},
			}},
		},
	}
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var refusal *sessions.FeatureError
	waitFor(t, "steering to be refused while the 0.1.0 pod polls", func() (bool, error) {
		ok, err := s.Steer(ctx, session, "change course")
		if ok {
			return false, errors.New("a steer was sent while a worker without steering polls")
		}
		return errors.As(err, &refusal), nil
	})
	if refusal.EngineVersion != "0.1.0" || !strings.Contains(refusal.Worker, pod.Name) || refusal.Since != "0.2.0" {
		t.Fatalf("the refusal is %+v; want it to name the pod, engine 0.1.0 and 0.2.0", refusal)
	}
	t.Logf("refused: %v", refusal)
	if err := kube.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "steering to reach the session once the 0.1.0 pod has stopped polling", func() (bool, error) {
		sent, err := s.Steer(ctx, session, "change course")
		if errors.As(err, &refusal) {
			return false, nil
		}
		// The session is idle, so it may turn the steer down (false); what
		// matters is that the session, not the gate, answered.
		t.Logf("the session answered the steer: %v", sent)
		return true, err
	})
}
