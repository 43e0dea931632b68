package offload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/waitfor"
)

// pollInterval is how often a wait reads the NamespaceOffloading when the
// client cannot watch, and how long it pauses before watching again after a
// watch ended; tests shorten it.
var pollInterval = time.Second

// noCondition tells from the NamespaceOffloading, nil once it is gone,
// whether a wait is over. An error ends the wait at once.
type noCondition func(no *offloadv1alpha1.NamespaceOffloading) (bool, error)

// waitNamespaceOffloading waits until cond holds for the NamespaceOffloading
// of namespace, cond fails, or ctx ends, watching it when c can.
func waitNamespaceOffloading(ctx context.Context, c client.Client, namespace string, interval time.Duration, cond noCondition) error {
	key := types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.NamespaceOffloadingName}
	return waitfor.Object(ctx, c, &offloadv1alpha1.NamespaceOffloadingList{}, key, interval, cond)
}

// wait waits until the NamespaceOffloading of generation is Ready, shows
// each twin namespace as it becomes Ready, and fails at once when one failed.
func (o *NamespaceOptions) wait(ctx context.Context, steps *output.Steps, generation int64) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	reported := map[string]bool{}
	var last *offloadv1alpha1.NamespaceOffloading
	err := waitNamespaceOffloading(ctx, o.client, o.Namespace, o.pollInterval, func(no *offloadv1alpha1.NamespaceOffloading) (bool, error) {
		if no == nil {
			return false, newError(ErrBeingUnoffloaded, "the NamespaceOffloading of %s was deleted while waiting for it", o.Namespace)
		}
		last = no
		ready := meta.FindStatusCondition(no.Status.Conditions, offloadv1alpha1.ConditionReady)
		if stale(ready, generation) {
			return false, nil
		}
		for _, rn := range no.Status.RemoteNamespaces {
			switch rn.Phase {
			case offloadv1alpha1.RemoteNamespaceReady:
				if !reported[rn.ClusterID] {
					reported[rn.ClusterID] = true
					steps.Done(fmt.Sprintf("%s: twin namespace %s Ready", peerName(rn), rn.RemoteNamespace))
				}
			case offloadv1alpha1.RemoteNamespaceFailed:
				failed := &RemoteNamespaceFailedError{ClusterName: peerName(rn), RemoteNamespace: rn.RemoteNamespace, Message: rn.Message}
				steps.Fail(fmt.Sprintf("%s: twin namespace %s", peerName(rn), rn.RemoteNamespace), errors.New(failed.Message))
				return false, failed
			}
		}
		return ready != nil && ready.Status == metav1.ConditionTrue, nil
	})
	var failed *RemoteNamespaceFailedError
	switch {
	case errors.As(err, &failed):
		return fmt.Errorf("offloading namespace %s: %w; fix the cause and run this command again, or undo it with kubectl offload unoffload namespace %s", o.Namespace, err, o.Namespace)
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return newError(ErrTimeout, "namespace %s is not Ready after %s (--timeout)%s; see kubectl get namespaceoffloading -n %s %s -o yaml and the controller-manager logs (kubectl logs -n %s deploy/offload-controller-manager)",
			o.Namespace, o.Timeout, pendingDetail(last, generation), o.Namespace, offloadv1alpha1.NamespaceOffloadingName, o.installNamespace)
	case err != nil:
		return err
	}
	if n := len(last.Status.RemoteNamespaces); n > 0 {
		steps.Done(fmt.Sprintf("Namespace %s offloaded to %d %s", o.Namespace, n, plural(n, "peer", "peers")))
	} else {
		steps.Done(fmt.Sprintf("Namespace %s Ready, with no twin namespace", o.Namespace))
	}
	return nil
}

// stale tells whether the status was written for an older spec than
// generation: the agent sets the Ready condition's observedGeneration, and
// a status that does not say is taken as current.
func stale(ready *metav1.Condition, generation int64) bool {
	return ready != nil && ready.ObservedGeneration != 0 && ready.ObservedGeneration < generation
}

// pendingDetail says what --wait was still waiting for.
func pendingDetail(no *offloadv1alpha1.NamespaceOffloading, generation int64) string {
	if no == nil {
		return ""
	}
	ready := meta.FindStatusCondition(no.Status.Conditions, offloadv1alpha1.ConditionReady)
	if ready == nil && len(no.Status.RemoteNamespaces) == 0 {
		return ": the agent has reported no status; is the offload-controller-manager running?"
	}
	if stale(ready, generation) {
		return ": the agent has not seen the new spec yet"
	}
	var parts []string
	for _, rn := range no.Status.RemoteNamespaces {
		if rn.Phase != offloadv1alpha1.RemoteNamespaceReady {
			parts = append(parts, fmt.Sprintf("twin namespace %s on %s is %s", rn.RemoteNamespace, peerName(rn), rn.Phase))
		}
	}
	if ready != nil && ready.Message != "" {
		parts = append(parts, "Ready: "+ready.Message)
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// peerName names the peer of a twin namespace.
func peerName(rn offloadv1alpha1.RemoteNamespaceStatus) string {
	if rn.ClusterName != "" {
		return rn.ClusterName
	}
	return rn.ClusterID
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
