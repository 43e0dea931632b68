package peering

import (
	"context"
	"fmt"
	"net/http"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
)

// The Kubernetes versions this release supports, on each side of a
// peering: the minors it is tested on (make compat, docs/compatibility.md).
// Any two of them may peer, in either direction, so a consumer and its
// provider may be up to three minors apart. The chart's kubeVersion says
// the same range (a test checks it). Each side checks the pair at peering
// time, so a pair outside the policy is refused at `peer` rather than half
// working.
const (
	// OldestKubernetesMinor and NewestKubernetesMinor bound the supported
	// Kubernetes 1.x minors, both included.
	OldestKubernetesMinor = 34
	NewestKubernetesMinor = 37
)

// SupportedKubernetes describes the supported range, for messages and
// documentation: "v1.34 to v1.37".
func SupportedKubernetes() string {
	return fmt.Sprintf("v1.%d to v1.%d", OldestKubernetesMinor, NewestKubernetesMinor)
}

// CheckKubernetes returns an error when version, a Kubernetes version
// such as "v1.36.3" or "v1.35.2+k3s1", is outside the supported range or
// cannot be read. what names the cluster in the message ("the provider").
func CheckKubernetes(what, version string) error {
	v, err := utilversion.ParseGeneric(version)
	switch {
	case err != nil:
		return fmt.Errorf("%s reports Kubernetes version %q, which cannot be read; kubectl-offload supports %s", what, CleanText(version), SupportedKubernetes())
	case v.Major() != 1 || v.Minor() < OldestKubernetesMinor:
		return fmt.Errorf("%s runs Kubernetes %s, older than kubectl-offload supports (%s): upgrade its Kubernetes", what, CleanText(version), SupportedKubernetes())
	case v.Minor() > NewestKubernetesMinor:
		return fmt.Errorf("%s runs Kubernetes %s, newer than this release of kubectl-offload supports (%s): upgrade kubectl-offload on both clusters (kubectl offload upgrade)", what, CleanText(version), SupportedKubernetes())
	}
	return nil
}

// CheckKubernetesPair returns an Error with ReasonUnsupportedVersion when
// a consumer on Kubernetes consumer and a provider on provider are outside
// the policy: either side outside the supported range. An empty version
// is one an agent of an older release did not send: it passes, and the
// other side's check covers the pair.
func CheckKubernetesPair(consumer, provider string) *Error {
	for _, side := range []struct{ what, version string }{{"the consumer", consumer}, {"the provider", provider}} {
		if side.version == "" {
			continue
		}
		if err := CheckKubernetes(side.what, side.version); err != nil {
			return &Error{Reason: ReasonUnsupportedVersion, Message: err.Error(), Status: http.StatusUnprocessableEntity}
		}
	}
	return nil
}

// KubernetesVersionOf returns a function that asks the API server behind
// dc for its Kubernetes version, such as "v1.37.2".
func KubernetesVersionOf(dc discovery.ServerVersionInterface) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		v, err := dc.ServerVersion()
		if err != nil {
			return "", err
		}
		return v.GitVersion, nil
	}
}
