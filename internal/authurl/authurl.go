// Package authurl says where peers reach this cluster's auth service, the
// URL peer generate prints: the one place the CLI derives it, for peer
// generate, status and doctor.
package authurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// setAuthURL is the advice when no auth URL can be derived from the Service.
const setAuthURL = "set auth.url with kubectl offload upgrade --set auth.url=https://HOST:PORT"

// ErrNoLoadBalancerAddress means the auth Service is a LoadBalancer that has
// no ingress address yet; it usually gets one within minutes.
var ErrNoLoadBalancerAddress = errors.New("the LoadBalancer service " + offloadv1alpha1.Auth + " has no address yet")

// ErrNoNodeAddress means the auth Service is a NodePort but no node has an
// InternalIP, as with simulated nodes; auth.url must be set then.
var ErrNoNodeAddress = errors.New("no node has an InternalIP to reach the node port of service " + offloadv1alpha1.Auth)

// Configured is the auth.url value of a release's merged Helm values, ""
// when it is not set.
func Configured(values map[string]any) string {
	auth, _ := values["auth"].(map[string]any)
	u, _ := auth["url"].(string)
	return u
}

// Resolve returns the URL where peers reach this cluster's auth service,
// and the type of the Service it was derived from: configured (the
// release's auth.url value) when it is set, with no Service type, else an
// address derived from the offload-auth Service in namespace. A NodePort
// Service gives https://<first node InternalIP>:<nodePort>, a LoadBalancer
// its ingress IP or hostname and port, and a ClusterIP Service its
// in-cluster DNS name. When no address is known yet the error wraps
// ErrNoLoadBalancerAddress or ErrNoNodeAddress.
func Resolve(ctx context.Context, kube kubernetes.Interface, namespace, configured string) (string, corev1.ServiceType, error) {
	if configured != "" {
		return configured, "", nil
	}
	svc, err := kube.CoreV1().Services(namespace).Get(ctx, offloadv1alpha1.Auth, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", fmt.Errorf("service %s not found in namespace %s: run kubectl offload install", offloadv1alpha1.Auth, namespace)
	}
	if err != nil {
		return "", "", fmt.Errorf("reading service %s: %w", offloadv1alpha1.Auth, err)
	}
	port, err := authPort(svc)
	if err != nil {
		return "", svc.Spec.Type, err
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		if port.NodePort == 0 {
			return "", svc.Spec.Type, fmt.Errorf("service %s has no node port yet", offloadv1alpha1.Auth)
		}
		ip, err := servingNodeIP(ctx, kube, svc)
		if err != nil {
			return "", svc.Spec.Type, err
		}
		return httpsURL(ip, port.NodePort), svc.Spec.Type, nil
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			host := in.IP
			if host == "" {
				host = in.Hostname
			}
			if host != "" {
				return httpsURL(host, port.Port), svc.Spec.Type, nil
			}
		}
		return "", svc.Spec.Type, fmt.Errorf("%w: wait, or %s", ErrNoLoadBalancerAddress, setAuthURL)
	case corev1.ServiceTypeClusterIP, "":
		return httpsURL(fmt.Sprintf("%s.%s.svc", offloadv1alpha1.Auth, namespace), port.Port), corev1.ServiceTypeClusterIP, nil
	}
	return "", svc.Spec.Type, fmt.Errorf("service %s has type %s, which peers cannot reach: %s", offloadv1alpha1.Auth, svc.Spec.Type, setAuthURL)
}

// authPort returns the port named https, else the only port of svc.
func authPort(svc *corev1.Service) (corev1.ServicePort, error) {
	for _, p := range svc.Spec.Ports {
		if p.Name == "https" {
			return p, nil
		}
	}
	if len(svc.Spec.Ports) == 1 {
		return svc.Spec.Ports[0], nil
	}
	return corev1.ServicePort{}, fmt.Errorf("service %s has no port named https", svc.Name)
}

// servingNodeIP returns the InternalIP of the first node, by name, that
// runs a Ready pod of svc: with externalTrafficPolicy Local (the chart's
// default, so that the auth service sees each client's own address) only
// those nodes answer on the node port. Without such a pod, the first node.
// Virtual nodes are never chosen.
func servingNodeIP(ctx context.Context, kube kubernetes.Interface, svc *corev1.Service) (string, error) {
	serving := map[string]bool{}
	if len(svc.Spec.Selector) > 0 {
		pods, err := kube.CoreV1().Pods(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
		if err != nil {
			return "", fmt.Errorf("listing the pods of service %s: %w", svc.Name, err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && podutils.IsPodReady(&p) {
				serving[p.Spec.NodeName] = true
			}
		}
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!" + offloadv1alpha1.LabelType})
	if err != nil {
		return "", fmt.Errorf("listing nodes for the auth node port: %w", err)
	}
	// The best node serves, then comes first by name.
	var best *corev1.Node
	var bestIP string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ip := internalIP(n)
		if ip == "" {
			continue
		}
		if best == nil || serving[n.Name] && !serving[best.Name] || serving[n.Name] == serving[best.Name] && n.Name < best.Name {
			best, bestIP = n, ip
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: %s", ErrNoNodeAddress, setAuthURL)
	}
	return bestIP, nil
}

// internalIP returns the first InternalIP of n, "" when it has none.
func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return a.Address
		}
	}
	return ""
}

func httpsURL(host string, port int32) string {
	return "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
}
