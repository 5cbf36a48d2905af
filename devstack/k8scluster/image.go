package k8scluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// pauseArchive is PauseImage as a `docker save` archive: one layer holding the static
// pause binary at /pause, run as 65535 as upstream's is.
func pauseArchive(bin string) ([]byte, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("k8scluster: pause binary: %w", err)
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(exe)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		return nil, fmt.Errorf("k8scluster: %w", err)
	}
	lw.Write(exe)
	lw.Close()
	layerSum := sha256.Sum256(layer.Bytes())
	layerID := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
	if err != nil {
		return nil, fmt.Errorf("k8scluster: %w", err)
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{PauseImage}, "Layers": []string{layerID + "/layer.tar"},
	}})
	if err != nil {
		return nil, fmt.Errorf("k8scluster: %w", err)
	}
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {layerID + "/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return nil, fmt.Errorf("k8scluster: %w", err)
		}
		w.Write(f.data)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("k8scluster: %w", err)
	}
	return out.Bytes(), nil
}
