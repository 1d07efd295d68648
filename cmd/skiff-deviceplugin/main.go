// Command skiff-deviceplugin advertises a node's SR-IOV VFs to the kubelet
// as extended resources (device plugin API v1beta1).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiff-sdn/skiff/deviceplugin"
	"github.com/skiff-sdn/skiff/internal/logging"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skiff-deviceplugin:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		o          deviceplugin.Options
		configPath string
		logLevel   string
		linkWatch  bool
	)
	cmd := &cobra.Command{
		Use:           "skiff-deviceplugin",
		Short:         "Skiff's kubelet device plugin for SR-IOV VFs",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			if o.Pools, err = deviceplugin.LoadConfig(configPath); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.Logger = log
			if linkWatch {
				o.LinkEvents = deviceplugin.LinkHints(ctx, log)
			}
			return deviceplugin.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "/etc/skiff/deviceplugin.yaml", "pool configuration (YAML or JSON)")
	f.StringVar(&o.SysRoot, "sys-root", "/sys", "where sysfs is mounted")
	f.StringVar(&o.DevRoot, "dev-root", "/dev", "where /dev is mounted (vfio pools check /dev/vfio/<group> under it)")
	f.StringVar(&o.PluginDir, "plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory: the plugin's sockets go here")
	f.StringVar(&o.KubeletSocket, "kubelet-socket", "/var/lib/kubelet/device-plugins/kubelet.sock", "the kubelet's registration socket")
	f.StringVar(&o.DevInfoDir, "devinfo-dir", deviceplugin.DefaultDevInfoDir, "where device-info files are written")
	f.DurationVar(&o.Rescan, "rescan", 5*time.Second, "how often VFs are read again from sysfs and devlink")
	f.DurationVar(&o.GoneHold, "gone-hold", time.Minute, "how long a VF that disappeared stays advertised as unhealthy before it is dropped")
	f.BoolVar(&linkWatch, "link-watch", true, "rescan at once when a link of this network namespace changes")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
