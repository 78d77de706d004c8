package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stepwise-run/stepwise/internal/render"
)

// A pass that finds nothing changed sends no write request: at a thousand
// Agents, every resync of the operator's cache and every restart would
// otherwise send thousands of writes that change nothing.

// appliedAlready is whether applying obj would change nothing: the fields
// this operator applied to live, read back from live's managed fields with
// the values live holds, are exactly those obj sets. A field another
// manager changed or took over is no longer the operator's and shows as a
// difference, and a field obj no longer sets shows too, so whenever the
// apply would change something it is sent. live is nil, or a nil pointer,
// when the object does not exist.
func appliedAlready(obj any, live client.Object) (bool, error) {
	var (
		owned any
		err   error
	)
	switch o := live.(type) {
	case *appsv1.Deployment:
		if o == nil {
			return false, nil
		}
		owned, err = appsv1ac.ExtractDeployment(o, render.FieldOwner)
	case *corev1.ConfigMap:
		if o == nil {
			return false, nil
		}
		owned, err = corev1ac.ExtractConfigMap(o, render.FieldOwner)
	case *corev1.ServiceAccount:
		if o == nil {
			return false, nil
		}
		owned, err = corev1ac.ExtractServiceAccount(o, render.FieldOwner)
	case *policyv1.PodDisruptionBudget:
		if o == nil {
			return false, nil
		}
		owned, err = policyv1ac.ExtractPodDisruptionBudget(o, render.FieldOwner)
	case *networkingv1.NetworkPolicy:
		if o == nil {
			return false, nil
		}
		owned, err = networkingv1ac.ExtractNetworkPolicy(o, render.FieldOwner)
	case *corev1.Secret:
		if o == nil {
			return false, nil
		}
		owned, err = corev1ac.ExtractSecret(o, render.FieldOwner)
	default:
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the fields the operator applied to %T %s: %w", live, live.GetName(), err)
	}
	return sameJSON(obj, owned)
}

// sameJSON compares two apply configurations by the documents they send,
// so quantities and other values compare in their canonical spelling.
func sameJSON(a, b any) (bool, error) {
	var docs [2]any
	for i, v := range []any{a, b} {
		data, err := json.Marshal(v)
		if err != nil {
			return false, fmt.Errorf("encoding %T: %w", v, err)
		}
		if err := json.Unmarshal(data, &docs[i]); err != nil {
			return false, fmt.Errorf("decoding %T: %w", v, err)
		}
	}
	return reflect.DeepEqual(docs[0], docs[1]), nil
}

// patchStatus writes the change to obj's status since before, read at the
// start of the pass, with a merge patch; when the pass changed nothing, it
// sends nothing.
func patchStatus(ctx context.Context, c client.Client, obj, before client.Object) error {
	patch := client.MergeFrom(before)
	data, err := patch.Data(obj)
	if err != nil {
		return fmt.Errorf("computing the status patch: %w", err)
	}
	if bytes.Equal(data, []byte("{}")) {
		return nil
	}
	return c.Status().Patch(ctx, obj, client.RawPatch(patch.Type(), data))
}
