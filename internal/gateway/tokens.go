package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stepwise-run/stepwise/internal/grants"
)

// SetPublishedGrants replaces the known tokens with a published document.
func (a *TokenAuthorizer) SetPublishedGrants(p grants.Published) error {
	byDigest := make(map[[sha256.Size]byte]grants.Grant, len(p.Grants))
	for _, g := range p.Grants {
		raw, err := hex.DecodeString(g.SHA256)
		if err != nil || len(raw) != sha256.Size {
			return fmt.Errorf("the grant of %s has no SHA-256 of its token", g.Source)
		}
		byDigest[[sha256.Size]byte(raw)] = grants.Grant{Source: g.Source, Namespace: g.Namespace, Agents: g.Agents, Verbs: g.Verbs}
	}
	a.mu.Lock()
	a.grants = byDigest
	a.mu.Unlock()
	return nil
}

// GrantsSource is the ConfigMap the operator publishes the grants in.
type GrantsSource struct {
	Namespace, Name string
}

// WatchPublishedGrants keeps auth's grants to the published ConfigMap in
// informers, which must hold that ConfigMap. A missing ConfigMap is no
// grants; an unreadable one keeps the grants last read.
func WatchPublishedGrants(ctx context.Context, informers cache.Cache, auth *TokenAuthorizer, src GrantsSource, logger *slog.Logger) error {
	informer, err := informers.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("watching the published grants: %w", err)
	}
	reload := func() {
		var cm corev1.ConfigMap
		err := informers.Get(ctx, client.ObjectKey{Namespace: src.Namespace, Name: src.Name}, &cm)
		var doc grants.Published
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			logger.Error("reading the published grants", "configMap", src.Namespace+"/"+src.Name, "error", err)
			return
		default:
			if err := json.Unmarshal([]byte(cm.Data[grants.PublishedKey]), &doc); err != nil {
				logger.Error("the published grants are not a grants document; keeping the last ones", "error", err)
				return
			}
		}
		if err := auth.SetPublishedGrants(doc); err != nil {
			logger.Error("the published grants are not usable; keeping the last ones", "error", err)
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { reload() },
		UpdateFunc: func(any, any) { reload() },
		DeleteFunc: func(any) { reload() },
	})
	if err != nil {
		return fmt.Errorf("watching the published grants: %w", err)
	}
	return nil
}
