package localcluster

import (
	"strings"
	"testing"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
)

func TestThePrintedPeerCommandIsReadBack(t *testing.T) {
	printed := "kubectl offload peer out-of-band provider --auth-url https://10.0.0.1:31443 --cluster-id 0b7f2c9e --auth-token abc.def --ca-cert-hash sha256:01ab\n"
	pc, err := parsePeerCommand(printed)
	if err != nil {
		t.Fatal(err)
	}
	want := PeerCommand{Command: strings.TrimSpace(printed), Name: "provider", AuthURL: "https://10.0.0.1:31443", ClusterID: "0b7f2c9e", AuthToken: "abc.def", CACertHash: "sha256:01ab"}
	if pc != want {
		t.Errorf("read %+v, want %+v", pc, want)
	}
	_, err = parsePeerCommand("Error: no --auth-token secret.token here")
	if err == nil || strings.Contains(err.Error(), "secret.token") {
		t.Errorf("not a command: %v; want an error that does not show the token", err)
	}
}

func TestTheFixtureInstallsWhereTheCLIDoesByDefault(t *testing.T) {
	if InstallNamespace != factory.DefaultNamespace {
		t.Errorf("the fixture installs in %q, the CLI by default in %q", InstallNamespace, factory.DefaultNamespace)
	}
}
