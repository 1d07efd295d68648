package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/skiff-sdn/skiff/deviceplugin/podresources"
)

// deviceID is the VF (PCI address) the pod's interface is to be: the
// configuration's deviceID, else runtimeConfig's, else the one device of
// conf.ResourceName the kubelet allocated to the pod ("" when it holds
// none, or when this is not a kubelet's pod or no kubelet serves pod
// resources here: a veth then).
func deviceID(ctx context.Context, conf *NetConf, ka k8sArgs) (string, error) {
	if conf.DeviceID != "" && conf.RuntimeConfig.DeviceID != "" && conf.DeviceID != conf.RuntimeConfig.DeviceID {
		return "", types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf(`"deviceID" %s and "runtimeConfig.deviceID" %s name different VFs`, conf.DeviceID, conf.RuntimeConfig.DeviceID), "")
	}
	if id := conf.DeviceID + conf.RuntimeConfig.DeviceID; id != "" {
		if conf.DeviceID != "" {
			return conf.DeviceID, nil
		}
		return conf.RuntimeConfig.DeviceID, nil
	}
	if ka.K8S_POD_NAME == "" {
		return "", nil
	}
	if _, err := os.Stat(conf.PodResourcesSocket); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	c, err := podresources.Dial(conf.PodResourcesSocket)
	if err != nil {
		return "", types.NewError(types.ErrInternal, "podResourcesSocket: "+err.Error(), "")
	}
	defer c.Close()
	ids, err := c.DeviceIDs(ctx, string(ka.K8S_POD_NAMESPACE), string(ka.K8S_POD_NAME), conf.ResourceName)
	switch {
	case errors.Is(err, podresources.ErrNoDevices):
		return "", nil
	case err != nil:
		return "", types.NewError(types.ErrTryAgainLater, "asking the kubelet for the pod's "+conf.ResourceName+" device: "+err.Error(), "")
	case len(ids) > 1:
		return "", types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("pod %s/%s holds %d devices of %s (%s): name the interface's in \"deviceID\" or runtimeConfig", ka.K8S_POD_NAMESPACE, ka.K8S_POD_NAME, len(ids), conf.ResourceName, strings.Join(ids, ", ")), "")
	}
	return ids[0], nil
}
