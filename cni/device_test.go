package cni

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/skiff-sdn/skiff/deviceplugin/podresources/podrestest"
)

// kubelet answers the pod resources API's List (Get unimplemented: the
// client falls back to List, as with an older kubelet).
type kubelet struct {
	api.UnimplementedPodResourcesListerServer
	pods []*api.PodResources
}

func (k *kubelet) List(context.Context, *api.ListPodResourcesRequest) (*api.ListPodResourcesResponse, error) {
	return &api.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func pod(ns, name string, devs ...*api.ContainerDevices) *api.PodResources {
	return &api.PodResources{Namespace: ns, Name: name, Containers: []*api.ContainerResources{{Name: "app", Devices: devs}}}
}

func TestDeviceID(t *testing.T) {
	sock := podrestest.Serve(t, &kubelet{pods: []*api.PodResources{
		pod("default", "vf-pod", &api.ContainerDevices{ResourceName: "skiff.io/vf", DeviceIds: []string{"0000:7f:00.1"}}),
		pod("default", "other-pool", &api.ContainerDevices{ResourceName: "example.com/fast-vf", DeviceIds: []string{"0000:7f:00.3"}}),
		pod("default", "two", &api.ContainerDevices{ResourceName: "skiff.io/vf", DeviceIds: []string{"0000:7f:00.1", "0000:7f:00.2"}}),
		pod("default", "plain"),
	}})
	missing := filepath.Join(t.TempDir(), "none.sock")
	args := func(ns, name string) k8sArgs {
		var ka k8sArgs
		ka.K8S_POD_NAMESPACE, ka.K8S_POD_NAME = types.UnmarshallableString(ns), types.UnmarshallableString(name)
		return ka
	}
	for _, tc := range []struct {
		name    string
		conf    string
		ka      k8sArgs
		want    string
		errPart string
	}{
		{"from the kubelet", `{}`, args("default", "vf-pod"), "0000:7f:00.1", ""},
		{"resource name from the conflist", `{"resourceName": "example.com/fast-vf"}`, args("default", "other-pool"), "0000:7f:00.3", ""},
		{"pod without the resource: a veth", `{}`, args("default", "plain"), "", ""},
		{"pod of another pool: a veth", `{}`, args("default", "other-pool"), "", ""},
		{"deviceID in the config wins", `{"deviceID": "0000:7f:00.2"}`, args("default", "vf-pod"), "0000:7f:00.2", ""},
		{"deviceID in runtimeConfig", `{"runtimeConfig": {"deviceID": "0000:7f:00.3"}}`, args("default", "vf-pod"), "0000:7f:00.3", ""},
		{"both, different", `{"deviceID": "0000:7f:00.2", "runtimeConfig": {"deviceID": "0000:7f:00.3"}}`, args("default", "vf-pod"), "", "name different VFs"},
		{"two devices", `{}`, args("default", "two"), "", "holds 2 devices of skiff.io/vf"},
		{"pod unknown to the kubelet", `{}`, args("default", "ghost"), "", "default/ghost"},
		{"not a kubelet's pod", `{}`, k8sArgs{}, "", ""},
		{"no kubelet here: a veth", `{"podResourcesSocket": "` + missing + `"}`, args("default", "vf-pod"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := `{"network": "blue", "podResourcesSocket": "` + sock + `"`
			if rest := strings.TrimPrefix(tc.conf, "{"); rest != "}" {
				js += ", " + rest
			} else {
				js += "}"
			}
			conf, err := loadConf([]byte(js), true)
			if err != nil {
				t.Fatal(err)
			}
			got, err := deviceID(context.Background(), conf, tc.ka)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("deviceID = %q, %v; want an error saying %q", got, err, tc.errPart)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("deviceID = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
