// Command scale-etcd runs one member of a static etcd cluster, with the
// etcd server the controller embeds (go.etcd.io/etcd/server/v3/embed), so
// that the scale harness can kill a member with SIGKILL and start it again
// on the same data directory. Loopback only; not for production.
//
//	scale-etcd --name m1 --dir /tmp/m1 --client 127.0.0.1:23791 --peer 127.0.0.1:23801 \
//	  --cluster m1=http://127.0.0.1:23801,m2=http://127.0.0.1:23802,m3=http://127.0.0.1:23803
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scale-etcd:", err)
		os.Exit(1)
	}
}

func run() error {
	name := flag.String("name", "", "member name")
	dir := flag.String("dir", "", "data directory")
	client := flag.String("client", "", "client host:port")
	peer := flag.String("peer", "", "peer host:port")
	cluster := flag.String("cluster", "", "initial cluster: name=http://host:port,...")
	retention := flag.String("retention", "1h", "history kept (periodic compaction)")
	flag.Parse()
	if *name == "" || *dir == "" || *client == "" || *peer == "" || *cluster == "" {
		return fmt.Errorf("--name, --dir, --client, --peer and --cluster are required")
	}
	cu, err := url.Parse("http://" + *client)
	if err != nil {
		return fmt.Errorf("--client: %w", err)
	}
	pu, err := url.Parse("http://" + *peer)
	if err != nil {
		return fmt.Errorf("--peer: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = filepath.Join(*dir, "data")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *cluster
	cfg.InitialClusterToken = "skiff-scale"
	// A member started again on its data directory rejoins with what it
	// has; the flag is read only on the first start.
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = *retention
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
}
