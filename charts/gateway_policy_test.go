package charts_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/network"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// TestTheControllerManagerMakesOnlyGatewayDeployments checks, on a real API
// server, that the controller-manager's identity creates the gateway
// Deployment its code makes from the chart's template, and no Deployment
// that would run anything else, or run it with more.
func TestTheControllerManagerMakesOnlyGatewayDeployments(t *testing.T) {
	admin, err := kubernetes.NewForConfig(envtest.APIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	const policy = "offload-controller-manager-gateways"
	var release string
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	agent := controllerManagerUnder(t, admin, policy, func(ctx context.Context, agent kubernetes.Interface) error {
		if release == "" {
			var err error
			if release, err = agentRelease(ctx, agent); err != nil {
				return err
			}
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		_, err := agent.AppsV1().Deployments(release).Create(ctx, d, dry)
		return err
	})
	objs, err := renderIn(release, map[string]any{"clusterName": "test", "network": map[string]any{"enabled": true, "podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/12"}})
	if err != nil {
		t.Fatal(err)
	}
	var tpl corev1.PodTemplateSpec
	data := objs["ConfigMap/"+offloadv1alpha1.GatewayTemplateConfigMap]["data"].(map[string]any)[offloadv1alpha1.GatewayTemplateKey].(string)
	if err := yaml.UnmarshalStrict([]byte(data), &tpl); err != nil {
		t.Fatal(err)
	}
	gateway := func(role offloadv1alpha1.TunnelRole) *appsv1.Deployment {
		tun := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Name: "provider", Namespace: release}, Spec: offloadv1alpha1.TunnelSpec{Role: role}}
		return network.GatewayDeployment(tun, &tpl)
	}
	ctx := t.Context()
	for _, role := range []offloadv1alpha1.TunnelRole{offloadv1alpha1.TunnelServer, offloadv1alpha1.TunnelClient} {
		t.Run("the agent's "+string(role)+" gateway is admitted", func(t *testing.T) {
			if _, err := agent.AppsV1().Deployments(release).Create(ctx, gateway(role), dry); err != nil {
				t.Fatal(err)
			}
		})
	}
	gw := func(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }
	for name, change := range map[string]func(*appsv1.Deployment){
		"a privileged container": func(d *appsv1.Deployment) {
			gw(d).SecurityContext.Privileged = ptr.To(true)
			gw(d).SecurityContext.AllowPrivilegeEscalation = nil
		},
		"a privileged init container": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: gw(d).Image, Args: []string{"gateway"},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		},
		"an added SYS_ADMIN": func(d *appsv1.Deployment) {
			gw(d).SecurityContext.Capabilities.Add = append(gw(d).SecurityContext.Capabilities.Add, "SYS_ADMIN")
		},
		"privilege escalation": func(d *appsv1.Deployment) { gw(d).SecurityContext.AllowPrivilegeEscalation = nil },
		"no seccomp": func(d *appsv1.Deployment) {
			gw(d).SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		},
		"the host's network": func(d *appsv1.Deployment) { d.Spec.Template.Spec.HostNetwork = true },
		"the host's PIDs":    func(d *appsv1.Deployment) { d.Spec.Template.Spec.HostPID = true },
		"another image":      func(d *appsv1.Deployment) { gw(d).Image = "attacker/tools:latest" },
		"another command":    func(d *appsv1.Deployment) { gw(d).Command = []string{"/bin/sh", "-c", "id"} },
		"a second container": func(d *appsv1.Deployment) {
			side := *gw(d)
			side.Name = "sidecar"
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, side)
		},
		"another identity": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.ServiceAccountName = offloadv1alpha1.ControllerManager
		},
		"a name of the agent's": func(d *appsv1.Deployment) { d.Name = "offload-auth"; d.Spec.Template.Spec.ServiceAccountName = d.Name },
		"a hostPath volume": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: "root",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"another Secret (a peer's kubeconfig)": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: "kubeconfig",
				VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "offload-peer-provider-kubeconfig"}}})
		},
	} {
		t.Run(name+" is refused", func(t *testing.T) {
			d := gateway(offloadv1alpha1.TunnelServer)
			change(d)
			_, err := agent.AppsV1().Deployments(release).Create(ctx, d, dry)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policy) {
				t.Fatalf("err = %v, want Forbidden by %s", err, policy)
			}
		})
	}
	t.Run("updating the gateway to another image is refused", func(t *testing.T) {
		d, err := agent.AppsV1().Deployments(release).Create(ctx, gateway(offloadv1alpha1.TunnelClient), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gw(d).Image = "attacker/tools:latest"
		_, err = agent.AppsV1().Deployments(release).Update(ctx, d, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policy) {
			t.Fatalf("err = %v, want Forbidden by %s", err, policy)
		}
	})
}
