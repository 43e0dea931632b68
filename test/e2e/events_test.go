package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	"github.com/kubectl-offload/kubectl-offload/test/framework/localcluster"
)

// The chapters of this file run in
// TestOffloadedPodsRunInTheProvidersTwinNamespace (offload_test.go).

// expectRemoteFailuresShown offloads a pod whose image the provider's node
// does not have, and checks that the consumer tells why it does not run,
// as a real node would: the container's waiting reason, and the
// provider's events of the pod, from provider/NAME, in kubectl describe.
func expectRemoteFailuresShown(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "missing-image"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(1)),
			Containers:                    []corev1.Container{{Name: "app", Image: "offload.test/missing:v1", ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := consumer.Kube.CoreV1().Pods("work").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = consumer.Kube.CoreV1().Pods("work").Delete(ctx, pod.Name, metav1.DeleteOptions{}) }()
	const reason = "ErrImageNeverPull"
	waitFor(ctx, t, 2*time.Minute, "the consumer pod waiting with "+reason, func(ctx context.Context) (bool, string) {
		p, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(containerWaiting(*p), reason+":"), fmt.Sprintf("phase %s, waiting %q", p.Status.Phase, containerWaiting(*p))
	})
	source := "provider/" + provider.Name
	waitFor(ctx, t, time.Minute, "the provider's "+reason+" event on the consumer pod", func(ctx context.Context) (bool, string) {
		events, err := consumer.Kube.CoreV1().Events("work").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod.Name).String()})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range events.Items {
			if ev.Source.Component == source && ev.Reason == reason && ev.Type == corev1.EventTypeWarning {
				return true, ""
			}
			seen = append(seen, ev.Source.Component+" "+ev.Reason)
		}
		return false, "events: " + strings.Join(seen, ", ")
	})
	if out, err := kubectl(t, consumer, "-n", "work", "describe", "pod", pod.Name); err != nil || !strings.Contains(out, source) || !strings.Contains(out, reason) {
		t.Errorf("kubectl describe pod %s: err=%v; want the provider's %s event from %s in:\n%s", pod.Name, err, reason, source, out)
	}
}

// expectSpecUpdatesReachTheRemotePod updates the spec of an offloaded pod
// as a user would: a deadline alone, and the tolerations from the user's
// manifest (without those the webhook added) plus one. Both updates are
// accepted, and the deadline reaches the remote pod with no label or
// annotation changed.
func expectSpecUpdatesReachTheRemotePod(ctx context.Context, t *testing.T, consumer, provider *localcluster.Cluster, twin string) {
	t.Helper()
	app := offloadedApp("spec-update", 1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "spec-update", Labels: app.Spec.Template.Labels}, Spec: app.Spec.Template.Spec}
	downward := map[string]string{"POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid", "NODE_NAME": "spec.nodeName"}
	for name, path := range downward {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: name,
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}})
	}
	if _, err := consumer.Kube.CoreV1().Pods("work").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = consumer.Kube.CoreV1().Pods("work").Delete(ctx, pod.Name, metav1.DeleteOptions{}) }()
	waitPodsReady(ctx, t, provider, twin, "app=spec-update", 1)

	local, err := consumer.Kube.CoreV1().Pods("work").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Through the downward API the container sees its consumer pod.
	out, err := kubectl(t, consumer, "-n", "work", "exec", pod.Name, "--", "/testapp", "get", "http://127.0.0.1:8080/env")
	var env map[string]string
	if err == nil {
		err = jsonUnmarshal(out, &env)
	}
	if want := map[string]string{"POD_NAMESPACE": "work", "POD_UID": string(local.UID), "NODE_NAME": local.Spec.NodeName}; err != nil ||
		env["POD_NAMESPACE"] != want["POD_NAMESPACE"] || env["POD_UID"] != want["POD_UID"] || env["NODE_NAME"] != want["NODE_NAME"] {
		t.Errorf("the offloaded container's downward API env: err=%v, %v; want the consumer pod's %v", err, env, want)
	}
	// The agent writes the pod's status meanwhile: like kubectl edit, each
	// update applies to the latest version, again after a conflict.
	if _, err := updatePod(ctx, consumer, "work", pod.Name, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(3600)) }); err != nil {
		t.Fatalf("setting activeDeadlineSeconds: %v", err)
	}
	took := waitFor(ctx, t, time.Minute, "the deadline on the remote pod", func(ctx context.Context) (bool, string) {
		r, err := provider.Kube.CoreV1().Pods(twin).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return r.Spec.ActiveDeadlineSeconds != nil && *r.Spec.ActiveDeadlineSeconds == 3600, fmt.Sprint(r.Spec.ActiveDeadlineSeconds)
	})
	t.Logf("a spec-only update reached the remote pod in %s", took.Round(time.Millisecond))

	// The user's manifest never had the tolerations the webhook added.
	maintenance := corev1.Toleration{Key: "example.com/maintenance", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	updated, err := updatePod(ctx, consumer, "work", pod.Name, func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{maintenance} })
	if err != nil {
		t.Fatalf("updating the tolerations from the user's manifest: %v; want it accepted, the webhook's tolerations kept", err)
	}
	if !tolerates(updated, "example.com/maintenance") || !tolerates(updated, "offload.io/virtual-node") {
		t.Errorf("tolerations after the update: %+v; want the new one and the virtual node's", updated.Spec.Tolerations)
	}
}

// updatePod applies mutate to the latest version of pod ns/name and writes
// it, reading it again after a conflict, as kubectl edit or apply does.
func updatePod(ctx context.Context, c *localcluster.Cluster, ns, name string, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(p)
		out, err = c.Kube.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
	return out, err
}
