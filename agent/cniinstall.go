package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/cni"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// What an installation (a Kubernetes DaemonSet, a systemd unit) asks of
// the agent beyond its datapath: install the CNI plugin once the node can
// serve pods (here), and keep its certificate renewed (certrenew.go).

// CNIInstall says where the runtime's CNI files go and which network pods
// join (Config.CNI).
type CNIInstall struct {
	// Network is the Skiff network of the configuration list; it must
	// exist at the controller before anything is installed.
	Network string
	// BinDir, ConfDir and File: see cni.InstallOptions.
	BinDir, ConfDir, File string
	// Binary is the skiff-cni executable to install.
	Binary string
}

// cniRetry is how often an install that could not be done is tried again
// while the agent stays connected (a network created later).
const cniRetry = 3 * time.Second

// installCNI installs skiff-cni and its configuration list once the
// controller is connected and the network exists, and again after every
// reconnection (cni.Install writes nothing when the files match), until
// ctx ends. Until it succeeds the agent is not ready, and says why: a node
// is not offered to pods before its network can serve them, and nothing is
// installed from a configuration that names a network that does not exist.
func (a *Agent) installCNI(ctx context.Context) {
	c := a.cfg.CNI
	a.setCNIState(errors.New("not installed yet: waiting for the controller"))
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.cniSig:
		case <-retry.C:
		}
		if !a.connectedNow() {
			continue
		}
		err := a.tryInstallCNI(ctx, c)
		a.setCNIState(err)
		if err != nil {
			if err.Error() != last {
				a.log.Error("CNI not installed", "err", err)
			}
			last = err.Error()
			retry.Reset(cniRetry)
			continue
		}
		if last != "installed" {
			a.log.Info("CNI installed", "network", c.Network, "binDir", c.BinDir, "confDir", c.ConfDir)
		}
		last = "installed"
	}
}

func (a *Agent) tryInstallCNI(ctx context.Context, c *CNIInstall) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := a.client.GetNetwork(rctx, &skiffv1.GetRequest{Name: c.Network})
	cancel()
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("CNI network %q does not exist at the controller: nothing is installed (fix the settings' podNetwork.name)", c.Network)
	}
	if err != nil {
		return fmt.Errorf("CNI network %q: %w", c.Network, err)
	}
	return cni.Install(cni.InstallOptions{Binary: c.Binary, BinDir: c.BinDir, ConfDir: c.ConfDir, File: c.File,
		Name: "skiff", Network: c.Network, Socket: a.cfg.Socket})
}

func (a *Agent) setCNIState(err error) {
	a.mu.Lock()
	a.cniErr = err
	a.mu.Unlock()
}

func (a *Agent) connectedNow() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.isConnected
}

func (a *Agent) kickCNI() {
	select {
	case a.cniSig <- struct{}{}:
	default:
	}
}
