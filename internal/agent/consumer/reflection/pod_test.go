package reflection_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

func TestRemotePodMetadata(t *testing.T) {
	local := offloadedPod()
	local.Labels[offloadv1alpha1.LabelOriginClusterID] = "someone-else"
	remote := mustRemote(t, local, origin())

	want := metav1.ObjectMeta{
		Name:      "web-7d9f-abcde",
		Namespace: twinNS,
		Labels: map[string]string{
			"app": "web", "pod-template-hash": "7d9f",
			offloadv1alpha1.LabelOriginClusterID: consumerID,
			offloadv1alpha1.LabelOriginPodUID:    "local-uid-1",
		},
		Annotations: map[string]string{
			"team": "shop", "prometheus.io/scrape": "true",
			reflection.AnnotationOriginPod:            "shop/web-7d9f-abcde",
			reflection.AnnotationReflectedAnnotations: "prometheus.io/scrape,team",
		},
	}
	// Owner references, finalizers, UID and resourceVersion stay behind: the
	// provider's garbage collector would delete a pod owned by a missing UID.
	assertEqual(t, "metadata", want, remote.ObjectMeta)
	if remote.Kind != "Pod" || remote.APIVersion != "v1" {
		t.Errorf("type meta = %v", remote.TypeMeta)
	}
	if remote.Status.Phase != "" || len(remote.Status.Conditions) != 0 {
		t.Errorf("the remote pod carries a status: %v", remote.Status)
	}
}

func TestRemotePodSpec(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		origin func(*reflection.Origin)
		check  func(t *testing.T, local, remote *corev1.Pod)
	}{{
		name: "the node name, scheduler, priority, overhead, gates and ephemeral containers are dropped",
		mutate: func(p *corev1.Pod) {
			p.Spec.SchedulerName = "shop-scheduler"
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/wait"}}
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			s := r.Spec
			if s.NodeName != "" || s.SchedulerName != "" || s.PriorityClassName != "" || s.Priority != nil ||
				s.PreemptionPolicy != nil || s.Overhead != nil || s.SchedulingGates != nil ||
				s.EphemeralContainers != nil || s.ReadinessGates != nil {
				t.Errorf("spec keeps consumer-only fields: %+v", s)
			}
		},
	}, {
		name: "containers, resources, env, probes, security contexts and restart policy are kept",
		check: func(t *testing.T, l, r *corev1.Pod) {
			assertEqual(t, "containers", l.Spec.Containers[0].Resources, r.Spec.Containers[0].Resources)
			assertEqual(t, "env", l.Spec.Containers[0].Env, r.Spec.Containers[0].Env)
			assertEqual(t, "envFrom", l.Spec.Containers[0].EnvFrom, r.Spec.Containers[0].EnvFrom)
			assertEqual(t, "probes", l.Spec.Containers[0].ReadinessProbe, r.Spec.Containers[0].ReadinessProbe)
			assertEqual(t, "liveness", l.Spec.Containers[0].LivenessProbe, r.Spec.Containers[0].LivenessProbe)
			assertEqual(t, "container security", l.Spec.Containers[0].SecurityContext, r.Spec.Containers[0].SecurityContext)
			assertEqual(t, "pod security", l.Spec.SecurityContext, r.Spec.SecurityContext)
			assertEqual(t, "image pull secrets", l.Spec.ImagePullSecrets, r.Spec.ImagePullSecrets)
			if r.Spec.RestartPolicy != corev1.RestartPolicyAlways || *r.Spec.TerminationGracePeriodSeconds != 30 ||
				r.Spec.DNSPolicy != corev1.DNSClusterFirst || *r.Spec.RuntimeClassName != "gvisor" {
				t.Errorf("pod-level settings lost: %+v", r.Spec)
			}
		},
	}, {
		name: "containers drop NET_RAW, unless they drop everything or ask for it",
		mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = nil
			p.Spec.InitContainers = []corev1.Container{
				{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}},
				{Name: "ping", Image: "busybox", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}}},
				{Name: "chown", Image: "busybox", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CHOWN"}}}},
			}
		},
		check: func(t *testing.T, l, r *corev1.Pod) {
			assertEqual(t, "app", &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}, r.Spec.Containers[0].SecurityContext.Capabilities)
			assertEqual(t, "init", &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, r.Spec.InitContainers[0].SecurityContext.Capabilities)
			assertEqual(t, "ping", &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}, r.Spec.InitContainers[1].SecurityContext.Capabilities)
			assertEqual(t, "chown", &corev1.Capabilities{Add: []corev1.Capability{"CHOWN"}, Drop: []corev1.Capability{"NET_RAW"}}, r.Spec.InitContainers[2].SecurityContext.Capabilities)
			if l.Spec.Containers[0].SecurityContext != nil || l.Spec.InitContainers[2].SecurityContext.Capabilities.Drop != nil {
				t.Error("the local pod was changed")
			}
		},
	}, {
		name: "config map, secret, emptyDir and downward API volumes are kept under their names",
		check: func(t *testing.T, l, r *corev1.Pod) {
			assertEqual(t, "volumes", l.Spec.Volumes[:4], r.Spec.Volumes)
		},
	}, {
		name:   "tolerations of the virtual node and of partitions are dropped, the user's are kept when the provider allows node placement",
		origin: func(o *reflection.Origin) { o.NodePlacement = true },
		mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations,
				corev1.Toleration{Operator: corev1.TolerationOpExists},
				corev1.Toleration{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists},
				corev1.Toleration{Key: "offload.io/anything-else", Operator: corev1.TolerationOpExists},
				corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)})
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			assertEqual(t, "tolerations", []corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "shop", Effect: corev1.TaintEffectNoSchedule},
				{Operator: corev1.TolerationOpExists},
			}, r.Spec.Tolerations)
		},
	}, {
		name: "without node placement every toleration is dropped: the provider's admission adds its own",
		mutate: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations,
				corev1.Toleration{Operator: corev1.TolerationOpExists},
				corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			if r.Spec.Tolerations != nil {
				t.Errorf("tolerations = %v, want none", r.Spec.Tolerations)
			}
		},
	}, {
		name:   "node selector keys about virtual nodes are dropped when the provider allows node placement",
		origin: func(o *reflection.Origin) { o.NodePlacement = true },
		mutate: func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{
				offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode, "type": "virtual-kubelet",
				corev1.LabelHostname: vnName, "disktype": "ssd",
			}
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			assertEqual(t, "nodeSelector", map[string]string{"disktype": "ssd"}, r.Spec.NodeSelector)
		},
	}, {
		name: "without node placement only the operating system and architecture selectors are kept",
		mutate: func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{
				offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode, corev1.LabelHostname: vnName, "disktype": "ssd",
				corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
			}
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			assertEqual(t, "nodeSelector", map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}, r.Spec.NodeSelector)
		},
	}, {
		name: "a node selector only about virtual nodes disappears",
		mutate: func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			if r.Spec.NodeSelector != nil {
				t.Errorf("nodeSelector = %v, want nil", r.Spec.NodeSelector)
			}
		},
	}, {
		name: "without a reflected token the pod runs as default with no token volume",
		check: func(t *testing.T, _, r *corev1.Pod) {
			if r.Spec.ServiceAccountName != "default" || r.Spec.DeprecatedServiceAccount != "default" {
				t.Errorf("service account = %q/%q", r.Spec.ServiceAccountName, r.Spec.DeprecatedServiceAccount)
			}
			if !ptr.Equal(r.Spec.AutomountServiceAccountToken, ptr.To(false)) {
				t.Errorf("automount = %v, want false", r.Spec.AutomountServiceAccountToken)
			}
			for _, v := range r.Spec.Volumes {
				if strings.HasPrefix(v.Name, "kube-api-access-") {
					t.Errorf("token volume kept: %v", v.Name)
				}
			}
			assertEqual(t, "init mounts", []corev1.VolumeMount(nil), r.Spec.InitContainers[0].VolumeMounts)
			assertEqual(t, "mounts", []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}, {Name: "cache", MountPath: "/cache"}},
				r.Spec.Containers[0].VolumeMounts)
		},
	}, {
		name:   "with a reflected token the token volume reads token, CA and namespace from its Secret",
		origin: func(o *reflection.Origin) { o.ServiceAccountTokenSecret = "offload-sa-token-web-7d9f-abcde" },
		check: func(t *testing.T, l, r *corev1.Pod) {
			if r.Spec.ServiceAccountName != "default" || !ptr.Equal(r.Spec.AutomountServiceAccountToken, ptr.To(false)) {
				t.Errorf("the provider would mount its own token: %q %v", r.Spec.ServiceAccountName, r.Spec.AutomountServiceAccountToken)
			}
			ref := corev1.LocalObjectReference{Name: "offload-sa-token-web-7d9f-abcde"}
			want := corev1.Volume{Name: saVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To[int32](0o644),
				Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "token", Path: "token"}}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "namespace", Path: "namespace"}}}},
				},
			}}}
			assertEqual(t, "token volume", want, r.Spec.Volumes[4])
			assertEqual(t, "mounts", l.Spec.Containers[0].VolumeMounts, r.Spec.Containers[0].VolumeMounts)
			assertEqual(t, "init mounts", l.Spec.InitContainers[0].VolumeMounts, r.Spec.InitContainers[0].VolumeMounts)
		},
	}, {
		name: "topology spread over offload.io keys is dropped, over provider keys kept as a preference",
		mutate: func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: offloadv1alpha1.LabelRemoteClusterID, WhenUnsatisfiable: corev1.ScheduleAnyway},
				{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule},
			}
		},
		check: func(t *testing.T, _, r *corev1.Pod) {
			assertEqual(t, "spread", []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway},
			}, r.Spec.TopologySpreadConstraints)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := offloadedPod()
			if tt.mutate != nil {
				tt.mutate(local)
			}
			o := origin()
			if tt.origin != nil {
				tt.origin(&o)
			}
			tt.check(t, local, mustRemote(t, local, o))
		})
	}
}

func TestRemotePodRefusesPodsThatNeedTheProvidersNodes(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		reason string
	}{
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "it uses hostNetwork"},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "it uses hostPID"},
		{"hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, "it uses hostIPC"},
		{"a hostPath volume", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "logs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}})
		}, `volume "logs" is a hostPath`},
		{"a hostPort", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 80 }, `container "web" uses hostPort 80`},
		{"a PersistentVolumeClaim", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
		}, `volume "data": claim data is not storage of this provider (StorageClass offload)`},
		{"resource claims", func(p *corev1.Pod) { p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}} }, "resource claims"},
		{"a token of another audience", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "token"}}}}}})
		}, `volume "vault" projects a service-account token`},
		{"a required node affinity that excludes the virtual node", func(p *corev1.Pod) {
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Operator = corev1.NodeSelectorOpNotIn
		}, `its required node affinity excludes virtual node "offload-provider"`},
	}
	for _, tt := range tests {
		t.Run("a pod with "+tt.name+" is refused", func(t *testing.T) {
			local := offloadedPod()
			tt.mutate(local)
			_, err := reflection.RemotePod(local, origin())
			if !errors.Is(err, reflection.ErrNotOffloadable) {
				t.Fatalf("err = %v, want ErrNotOffloadable", err)
			}
			if !strings.Contains(err.Error(), tt.reason) || !strings.Contains(err.Error(), "keep it on local nodes") {
				t.Errorf("error %q does not say %q and what to do", err, tt.reason)
			}
		})
	}

	t.Run("every reason is listed at once", func(t *testing.T) {
		local := offloadedPod()
		local.Spec.HostNetwork, local.Spec.HostPID = true, true
		_, err := reflection.RemotePod(local, origin())
		var nerr *reflection.NotOffloadableError
		if !errors.As(err, &nerr) || len(nerr.Reasons) != 2 {
			t.Fatalf("err = %#v, want two reasons", err)
		}
	})
}

func TestRemotePodMountsTheRemoteClaimsOfTheClaimsThatHaveOne(t *testing.T) {
	local := offloadedPod()
	local.Spec.Volumes = append(local.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-web-0", ReadOnly: true}}})
	o := origin()
	o.Claims = map[string]string{"data-web-0": "data-web-0"}
	remote := mustRemote(t, local, o)
	v := remote.Spec.Volumes[len(remote.Spec.Volumes)-1]
	if v.Name != "data" || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "data-web-0" || !v.PersistentVolumeClaim.ReadOnly {
		t.Errorf("remote volume = %+v, want claim data-web-0 of the twin namespace, read-only", v)
	}

	o.Claims = nil
	o.ClaimProblems = map[string]string{"data-web-0": "claim data-web-0 is bound to volume pv-1 of this cluster, which the provider cannot reach"}
	_, err := reflection.RemotePod(local, o)
	if !errors.Is(err, reflection.ErrNotOffloadable) || !strings.Contains(err.Error(), `volume "data": claim data-web-0 is bound to volume pv-1 of this cluster`) {
		t.Errorf("err = %v, want ErrNotOffloadable saying why the claim has no storage there", err)
	}
}

func TestRemotePodIsDeterministicAndAFixedPoint(t *testing.T) {
	for _, o := range []reflection.Origin{origin(), {ClusterID: consumerID, TwinNamespace: twinNS, ServiceAccountTokenSecret: "tok"}} {
		local := offloadedPod()
		first, second := mustRemote(t, local, o), mustRemote(t, local, o)
		assertEqual(t, "second translation", first, second)

		// Translating the result again changes nothing in the spec: nothing
		// consumer-only is left in it.
		again := mustRemote(t, first, o)
		assertEqual(t, "retranslated spec", first.Spec, again.Spec)
	}
}

func TestRemotePodLeavesItsInputAlone(t *testing.T) {
	local := offloadedPod()
	local.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: corev1.LabelHostname, Namespaces: []string{"shop"},
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}}}
	o := origin()
	o.ServiceAccountTokenSecret = "tok"
	o.VirtualNodeLabels = vnLabels()
	before := local.DeepCopy()
	remote := mustRemote(t, local, o)
	assertEqual(t, "local pod", before, local)

	// Changing the result does not reach back into the input either.
	remote.Labels["x"] = "y"
	remote.Spec.Containers[0].Env[0].Value = "changed"
	remote.Spec.Volumes[0].ConfigMap.Name = "changed"
	remote.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels["app"] = "changed"
	assertEqual(t, "local pod after editing the remote", before, local)
}
