package version

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
)

// ServerVersions asks the cluster for its Kubernetes version and the
// installed chart and agent versions.
func ServerVersions(ctx context.Context, f factory.Factory) (*Server, error) {
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok && cfg.Timeout == 0 {
		cfg.Timeout = time.Until(dl)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	info, err := kube.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("asking the API server for its version: %w", err)
	}
	s := &Server{Kubernetes: info.GitVersion}

	helm, err := f.HelmConfig(f.Namespace())
	if err != nil {
		return nil, err
	}
	rel, err := helmclient.New(helm, f.Namespace()).Release(offloadv1alpha1.ReleaseName)
	switch {
	case err != nil:
		return nil, err
	case rel == nil:
		return s, nil
	}
	s.Installed, s.Chart = true, rel.ChartVersion
	dep, err := kube.AppsV1().Deployments(f.Namespace()).Get(ctx, offloadv1alpha1.ControllerManager, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading deployment %s: %w", offloadv1alpha1.ControllerManager, err)
	default:
		s.Agent = dep.Labels[offloadv1alpha1.VersionLabel]
	}
	return s, nil
}
