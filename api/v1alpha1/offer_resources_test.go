package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestOnlyExtendedResourcesCanBeLent(t *testing.T) {
	for r, ok := range map[corev1.ResourceName]bool{
		"nvidia.com/gpu": true, "example.com/fpga": true, "gpu.intel.com/i915": true,
		"cpu": false, "memory": false, "hugepages-2Mi": false, "kubernetes.io/batch-cpu": false,
		"requests.nvidia.com/gpu": false, "nvidia.com/": false, "nvidia.com/g pu": false, "": false,
	} {
		if err := ValidateExtendedResource(r); (err == nil) != ok {
			t.Errorf("ValidateExtendedResource(%q) = %v, want ok=%v", r, err, ok)
		}
	}
	p := ConsumerPolicy{ExtendedResources: []corev1.ResourceName{"nvidia.com/gpu"}}
	for r, want := range map[corev1.ResourceName]bool{"nvidia.com/gpu": true, "example.com/fpga": false, "cpu": true, "hugepages-2Mi": false} {
		if got := p.Lends(r); got != want {
			t.Errorf("Lends(%s) = %v, want %v", r, got, want)
		}
	}
	if !p.Equal(ConsumerPolicy{ExtendedResources: []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpu"}}) || p.Equal(ConsumerPolicy{}) {
		t.Errorf("Equal does not compare the lent extended resources as a set")
	}
}
