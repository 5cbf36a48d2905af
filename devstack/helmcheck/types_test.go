package helmcheck

import (
	"bytes"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// strictDecode reads a rendered object into its Kubernetes API type, refusing any field
// the type does not have: a misspelt or misplaced key, which the API server would refuse
// (kubectl's strict field validation) or drop, fails here without a cluster.
func strictDecode(o obj) error {
	var into any
	switch o.kind() {
	case "Deployment":
		into = &appsv1.Deployment{}
	case "StatefulSet":
		into = &appsv1.StatefulSet{}
	case "Service":
		into = &corev1.Service{}
	case "ConfigMap":
		into = &corev1.ConfigMap{}
	case "Secret":
		into = &corev1.Secret{}
	case "ServiceAccount":
		into = &corev1.ServiceAccount{}
	case "PersistentVolumeClaim":
		into = &corev1.PersistentVolumeClaim{}
	case "NetworkPolicy":
		into = &networkingv1.NetworkPolicy{}
	case "HorizontalPodAutoscaler":
		into = &autoscalingv2.HorizontalPodAutoscaler{}
	default:
		return fmt.Errorf("%s %s: a kind this check does not know", o.kind(), o.name())
	}
	raw, err := json.Marshal(map[string]any(o))
	if err != nil {
		return fmt.Errorf("%s %s: %w", o.kind(), o.name(), err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%s %s: %w", o.kind(), o.name(), err)
	}
	return nil
}
