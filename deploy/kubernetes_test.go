package deploy

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/skiff-sdn/skiff/deviceplugin"
)

// object is the part of a manifest the test reads.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name, Namespace string
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		Template struct {
			Spec struct {
				NodeSelector map[string]string `json:"nodeSelector"`
				Containers   []struct {
					Image string `json:"image"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// TestOverlays builds every overlay with kubectl kustomize; the offload
// overlay carries the device plugin's DaemonSet (on labelled nodes, the
// project's image) and a pool configuration the plugin accepts.
func TestOverlays(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl (hack/deps.sh installs it): %v", err)
	}
	overlays, err := filepath.Glob("kubernetes/overlays/*")
	if err != nil || len(overlays) == 0 {
		t.Fatalf("no overlays: %v", err)
	}
	for _, o := range overlays {
		out, err := exec.Command("kubectl", "kustomize", o).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v\n%s", o, err, out)
			continue
		}
		objs := map[string]object{}
		for _, doc := range bytes.Split(out, []byte("\n---\n")) {
			var obj object
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Fatalf("%s: %v\n%s", o, err, doc)
			}
			objs[obj.Kind+"/"+obj.Metadata.Name] = obj
		}
		ds, hasDS := objs["DaemonSet/skiff-deviceplugin"]
		cm := objs["ConfigMap/skiff-deviceplugin"]
		if filepath.Base(o) != "offload" {
			if hasDS {
				t.Errorf("%s: has the device plugin", o)
			}
			continue
		}
		switch {
		case !hasDS:
			t.Fatalf("%s: no device plugin DaemonSet", o)
		case ds.Metadata.Namespace != "skiff-system" || cm.Metadata.Namespace != "skiff-system":
			t.Errorf("%s: device plugin in namespace %q, config in %q", o, ds.Metadata.Namespace, cm.Metadata.Namespace)
		case ds.Spec.Template.Spec.NodeSelector["skiff.io/vf-capable"] != "true":
			t.Errorf("%s: device plugin node selector %v", o, ds.Spec.Template.Spec.NodeSelector)
		case len(ds.Spec.Template.Spec.Containers) != 1 || ds.Spec.Template.Spec.Containers[0].Image != "skiff.local/skiff:dev":
			t.Errorf("%s: device plugin containers %+v", o, ds.Spec.Template.Spec.Containers)
		}
		cfg, err := deviceplugin.ParseConfig([]byte(cm.Data["deviceplugin.yaml"]))
		if err != nil || len(cfg.Pools) == 0 || cfg.Pools[0].ResourceName != "skiff.io/vf" {
			t.Errorf("%s: device plugin config %+v: %v", o, cfg, err)
		}
	}
}
