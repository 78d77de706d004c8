package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

// benchNamespace holds every object the benchmark creates.
const benchNamespace = "bench"

// mediaRoot is the host directory the operator allows MediaStores to mount.
const mediaRoot = "/srv/stepwise"

// createReferences creates the namespace, and the ToolSources and
// MediaStores the Agents share.
func createReferences(ctx context.Context, c client.Client, opts options) error {
	if err := c.Create(ctx, &agentsv1.ClusterEngine{ObjectMeta: metav1.ObjectMeta{Name: benchEngine}, Spec: agentsv1.ClusterEngineSpec{
		Address: "temporal-frontend.temporal.svc:7233", Namespace: "default", NamespaceSelector: &metav1.LabelSelector{},
	}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
		return err
	}
	for i := range referenceGroups(opts) {
		ts := &agentsv1.ToolSource{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("tools-%d", i)},
			Spec:       agentsv1.ToolSourceSpec{MCP: agentsv1.MCPServer{Stdio: &agentsv1.MCPStdio{Command: "mcp-server-files"}}},
		}
		ms := &agentsv1.MediaStore{
			ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("media-%d", i)},
			Spec:       agentsv1.MediaStoreSpec{LocalDirectory: &agentsv1.LocalDirectoryMediaStore{Root: fmt.Sprintf("%s/%s/media-%d", mediaRoot, benchNamespace, i)}},
		}
		if err := errors.Join(c.Create(ctx, ts), c.Create(ctx, ms)); err != nil {
			return err
		}
	}
	return nil
}

// referenceGroups is how many ToolSource and MediaStore pairs there are.
func referenceGroups(opts options) int {
	if opts.sharedBy == 0 {
		return 0
	}
	return (opts.agents + opts.sharedBy - 1) / opts.sharedBy
}

func referencesText(opts options) string {
	if opts.sharedBy == 0 {
		return "no ToolSources or MediaStores"
	}
	return fmt.Sprintf("each group of %d shares one ToolSource and one MediaStore: %d of each", opts.sharedBy, referenceGroups(opts))
}

// createAgents creates the Agents from opts.concurrency clients at once.
func createAgents(ctx context.Context, c client.Client, opts options, watch *readiness) error {
	names := make(chan int)
	errs := make(chan error, opts.concurrency)
	var wg sync.WaitGroup
	for range opts.concurrency {
		wg.Go(func() {
			for i := range names {
				agent := benchAgent(i, opts)
				watch.created(agent.Name)
				if err := c.Create(ctx, agent); err != nil {
					errs <- fmt.Errorf("creating Agent %s: %w", agent.Name, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range opts.agents {
		select {
		case names <- i:
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

// benchAgent is Agent i: a scripted model, its own Flow type, and, unless
// the Agents share none, its group's ToolSource and MediaStore.
func benchAgent(i int, opts options) *agentsv1.Agent {
	agent := &agentsv1.Agent{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("agent-%04d", i)},
		Spec: agentsv1.AgentSpec{
			FlowType:     fmt.Sprintf("BenchAgent%d", i),
			Instructions: "Answer questions about the benchmark.",
			Model:        agentsv1.ModelSpec{Provider: agentsv1.ModelProviderScripted, Name: "demo"},
		},
	}
	if opts.sharedBy > 0 {
		group := i / opts.sharedBy
		agent.Spec.ToolSources = []agentsv1.LocalObjectReference{{Name: fmt.Sprintf("tools-%d", group)}}
		agent.Spec.MediaStore = &agentsv1.LocalObjectReference{Name: fmt.Sprintf("media-%d", group)}
	}
	return agent
}
