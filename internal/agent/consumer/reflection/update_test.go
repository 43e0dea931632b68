package reflection_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// createdRemote is the remote pod as the provider holds it after creation:
// its admission added a toleration, a CNI an annotation.
func createdRemote(t *testing.T, local *corev1.Pod, o reflection.Origin) *corev1.Pod {
	remote := mustRemote(t, local, o)
	remote.Annotations["cni.projectcalico.org/podIP"] = "10.200.1.9/32"
	remote.Spec.NodeName = "provider-worker-2"
	remote.Spec.Tolerations = append(remote.Spec.Tolerations, corev1.Toleration{
		Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
	return remote
}

func TestUpdateRemote(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		check  func(t *testing.T, remote, updated *corev1.Pod)
	}{{
		name: "an unchanged consumer pod needs no update, whatever the provider added",
		check: func(t *testing.T, remote, updated *corev1.Pod) {
			assertEqual(t, "pod", remote, updated)
		},
	}, {
		name: "new images are pushed, matched by container name",
		mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "shop/web:2"
			p.Spec.InitContainers[0].Image = "shop/migrate:2"
		},
		check: func(t *testing.T, _, u *corev1.Pod) {
			if u.Spec.Containers[0].Image != "shop/web:2" || u.Spec.InitContainers[0].Image != "shop/migrate:2" {
				t.Errorf("images = %q %q", u.Spec.Containers[0].Image, u.Spec.InitContainers[0].Image)
			}
		},
	}, {
		name:   "an active deadline is set",
		mutate: func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](600) },
		check: func(t *testing.T, _, u *corev1.Pod) {
			if !ptr.Equal(u.Spec.ActiveDeadlineSeconds, ptr.To[int64](600)) {
				t.Errorf("activeDeadlineSeconds = %v", u.Spec.ActiveDeadlineSeconds)
			}
		},
	}, {
		name: "added tolerations are appended after the provider's, virtual-node ones are not",
		mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations,
				corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists},
				corev1.Toleration{Key: "offload.io/new", Operator: corev1.TolerationOpExists})
		},
		check: func(t *testing.T, r, u *corev1.Pod) {
			want := append(append([]corev1.Toleration(nil), r.Spec.Tolerations...), corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
			assertEqual(t, "tolerations", want, u.Spec.Tolerations)
		},
	}, {
		name: "labels follow the consumer's and keep the origin labels",
		mutate: func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "web", "version": "2"}
		},
		check: func(t *testing.T, _, u *corev1.Pod) {
			assertEqual(t, "labels", map[string]string{
				"app": "web", "version": "2",
				offloadv1alpha1.LabelOriginClusterID: consumerID, offloadv1alpha1.LabelOriginPodUID: "local-uid-1",
			}, u.Labels)
		},
	}, {
		name: "annotations the consumer removed go, those the provider added stay",
		mutate: func(p *corev1.Pod) {
			p.Annotations = map[string]string{"team": "payments"}
		},
		check: func(t *testing.T, _, u *corev1.Pod) {
			assertEqual(t, "annotations", map[string]string{
				"team":                                    "payments",
				"cni.projectcalico.org/podIP":             "10.200.1.9/32",
				reflection.AnnotationOriginPod:            "shop/web-7d9f-abcde",
				reflection.AnnotationReflectedAnnotations: "team",
			}, u.Annotations)
		},
	}, {
		name: "the last reflected annotation going removes the record too",
		mutate: func(p *corev1.Pod) {
			p.Annotations = nil
		},
		check: func(t *testing.T, _, u *corev1.Pod) {
			assertEqual(t, "annotations", map[string]string{
				"cni.projectcalico.org/podIP":  "10.200.1.9/32",
				reflection.AnnotationOriginPod: "shop/web-7d9f-abcde",
			}, u.Annotations)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := offloadedPod()
			o := origin()
			o.NodePlacement = true // so that added tolerations are sent
			remote := createdRemote(t, local, o)
			if tt.mutate != nil {
				tt.mutate(local)
			}
			localBefore, remoteBefore := local.DeepCopy(), remote.DeepCopy()
			updated, changed, err := reflection.UpdateRemote(remote, local, o)
			if err != nil {
				t.Fatalf("UpdateRemote: %v", err)
			}
			assertEqual(t, "local pod", localBefore, local)
			assertEqual(t, "remote pod", remoteBefore, remote)
			if changed != (tt.mutate != nil) {
				t.Errorf("changed = %v", changed)
			}
			if sc, _ := reflection.SpecChanged(remote, local, o); sc != changed {
				t.Errorf("SpecChanged = %v, UpdateRemote changed = %v", sc, changed)
			}
			tt.check(t, remote, updated)

			// Applying the update again is a no-op.
			if _, again, _ := reflection.UpdateRemote(updated, local, o); again {
				t.Error("a second update still finds changes")
			}
		})
	}
}

func TestUpdateRemoteNeverLengthensOrUnsetsTheDeadline(t *testing.T) {
	local := offloadedPod()
	remote := createdRemote(t, local, origin())
	remote.Spec.ActiveDeadlineSeconds = ptr.To[int64](100)
	for _, d := range []*int64{nil, ptr.To[int64](200)} {
		local.Spec.ActiveDeadlineSeconds = d
		u, changed, err := reflection.UpdateRemote(remote, local, origin())
		if err != nil || changed || *u.Spec.ActiveDeadlineSeconds != 100 {
			t.Errorf("deadline %v: changed=%v deadline=%v err=%v", d, changed, u.Spec.ActiveDeadlineSeconds, err)
		}
	}
}

func TestWithoutNodePlacementAnAddedTolerationNeverReachesTheProvider(t *testing.T) {
	local := offloadedPod()
	remote := createdRemote(t, local, origin())
	local.Spec.Tolerations = append(local.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
	u, changed, err := reflection.UpdateRemote(remote, local, origin())
	if err != nil || changed {
		t.Fatalf("UpdateRemote: changed=%v err=%v, want no change", changed, err)
	}
	assertEqual(t, "tolerations", remote.Spec.Tolerations, u.Spec.Tolerations)
}
