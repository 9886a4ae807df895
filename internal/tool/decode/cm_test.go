package decode

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestDecodeCM checks the cm object of the rping capture's CM exchange.
func TestDecodeCM(t *testing.T) {
	out, errs, code := decodeRun(nil, "--json", filepath.Join(capturesDir, "rxe_rping_rdmacm.pcap"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var p struct {
			MAD *struct {
				AttrName string `json:"attr_name"`
			} `json:"mad"`
			CM map[string]any `json:"cm"`
		}
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		if p.MAD == nil {
			continue
		}
		seen = append(seen, p.MAD.AttrName)
		if p.CM == nil {
			t.Fatalf("%s without a cm object", p.MAD.AttrName)
		}
		switch p.MAD.AttrName {
		case "REQ":
			rc := p.CM["rdma_cm"].(map[string]any)
			pr := p.CM["primary"].(map[string]any)
			if p.CM["service_id"].(float64) != 0x1061c06 || rc["service_port"].(float64) != 7174 ||
				rc["src"] != "198.18.0.12" || rc["dst"] != "198.18.0.11" || pr["local_gid"] != "198.18.0.12" {
				t.Errorf("REQ: %v", p.CM)
			}
		case "REP", "RTU", "DREQ", "DREP":
			if p.CM["local_comm_id"] == nil {
				t.Errorf("%s: %v", p.MAD.AttrName, p.CM)
			}
		}
	}
	if strings.Join(seen, " ") != "REQ REP RTU DREQ DREP" {
		t.Fatalf("CM messages %v", seen)
	}
}
