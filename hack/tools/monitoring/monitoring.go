// Package monitoring holds the Prometheus Operator's API in this module, for
// controller-gen to generate its CRDs from.
package monitoring

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
