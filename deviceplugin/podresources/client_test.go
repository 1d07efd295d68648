package podresources

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/skiff-sdn/skiff/deviceplugin/podresources/podrestest"
)

// kubelet is an in-process pod resources server holding pods; with noGet
// it answers Get as a kubelet with the KubeletPodResourcesGet gate off
// (an error), so clients must use List.
type kubelet struct {
	api.UnimplementedPodResourcesListerServer
	pods  []*api.PodResources
	noGet bool

	mu    sync.Mutex
	calls []string
}

func (k *kubelet) record(c string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, c)
}

func (k *kubelet) List(context.Context, *api.ListPodResourcesRequest) (*api.ListPodResourcesResponse, error) {
	k.record("List")
	return &api.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *kubelet) Get(_ context.Context, r *api.GetPodResourcesRequest) (*api.GetPodResourcesResponse, error) {
	k.record("Get")
	if k.noGet {
		return nil, status.Error(codes.Unknown, "PodResources API Get method disabled")
	}
	for _, p := range k.pods {
		if p.Namespace == r.PodNamespace && p.Name == r.PodName {
			return &api.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", r.PodName, r.PodNamespace)
}

func devs(resource string, ids ...string) *api.ContainerDevices {
	return &api.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func pods() []*api.PodResources {
	return []*api.PodResources{
		{Namespace: "default", Name: "web-0", Containers: []*api.ContainerResources{
			{Name: "app", Devices: []*api.ContainerDevices{devs("skiff.io/vf", "0000:03:00.5"), devs("example.com/gpu", "gpu-1")}},
			{Name: "sidecar", Devices: []*api.ContainerDevices{devs("skiff.io/vf", "0000:03:00.7", "0000:03:00.5")}},
		}},
		{Namespace: "other", Name: "web-0", Containers: []*api.ContainerResources{
			{Name: "app", Devices: []*api.ContainerDevices{devs("skiff.io/vf", "0000:81:00.2")}},
		}},
		{Namespace: "default", Name: "plain", Containers: []*api.ContainerResources{{Name: "app"}}},
	}
}

func TestDeviceIDs(t *testing.T) {
	for _, noGet := range []bool{false, true} {
		t.Run(fmt.Sprintf("noGet=%v", noGet), func(t *testing.T) {
			k := &kubelet{pods: pods(), noGet: noGet}
			c, err := Dial(podrestest.Serve(t, k))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			for _, tc := range []struct {
				ns, name, resource string
				want               string
				err                error
			}{
				{"default", "web-0", "skiff.io/vf", "0000:03:00.5 0000:03:00.7", nil},
				{"other", "web-0", "skiff.io/vf", "0000:81:00.2", nil},
				{"default", "web-0", "example.com/gpu", "gpu-1", nil},
				{"default", "plain", "skiff.io/vf", "", ErrNoDevices},
				{"default", "web-0", "skiff.io/vf-vfio", "", ErrNoDevices},
				{"default", "nope", "skiff.io/vf", "", ErrPodNotFound},
			} {
				ids, err := c.DeviceIDs(ctx, tc.ns, tc.name, tc.resource)
				if got := strings.Join(ids, " "); got != tc.want || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
					t.Errorf("DeviceIDs(%s/%s, %s) = %q, %v; want %q, %v", tc.ns, tc.name, tc.resource, got, err, tc.want, tc.err)
				}
				if err != nil && !strings.Contains(err.Error(), tc.ns+"/"+tc.name) {
					t.Errorf("error %q does not name the pod", err)
				}
			}
			k.mu.Lock()
			calls := strings.Join(k.calls, " ")
			k.mu.Unlock()
			if !noGet && strings.Contains(strings.Replace(calls, "Get List", "", -1), "List") {
				t.Errorf("List used although Get answers for existing pods: %s", calls)
			}
			if noGet && strings.Count(calls, "List") != 6 {
				t.Errorf("calls = %s, want a List after each Get", calls)
			}
		})
	}
}

func TestNoKubelet(t *testing.T) {
	c, err := Dial(filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.DeviceIDs(context.Background(), "default", "web-0", "skiff.io/vf")
	if err == nil || errors.Is(err, ErrPodNotFound) || !strings.Contains(err.Error(), "default/web-0") {
		t.Errorf("err = %v", err)
	}
}
