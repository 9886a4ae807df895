package diagram

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkPlantUML runs PlantUML's syntax check on diagram sources (text
// forms between @startuml and @enduml, which PlantUML needs and
// sequencediagram.org does without) and returns its output and error.
func checkPlantUML(t *testing.T, plantuml string, sources map[string]string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	args := []string{"-checkonly", "-charset", "UTF-8"}
	for name, src := range sources {
		file := filepath.Join(dir, name+".puml")
		if err := os.WriteFile(file, []byte("@startuml\n"+src+"@enduml\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, file)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plantuml, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPlantUML checks that the text form of every rxe capture is a
// sequence diagram PlantUML reads without a syntax error, as the seed
// diagram is: the form pastes into the tools the seed's readers use.
func TestPlantUML(t *testing.T) {
	plantuml, err := exec.LookPath("plantuml")
	if err != nil {
		t.Skip("no PlantUML to check the text form with: apt-get install -y plantuml")
	}
	t.Run("errors are seen", func(t *testing.T) {
		if _, err := checkPlantUML(t, plantuml, map[string]string{"bad": "A->B: x\nnote ovr A: y\n"}); err == nil {
			t.Fatal("PlantUML took a broken diagram: the check below would miss errors")
		}
	})
	sources := map[string]string{}
	for _, name := range allCaptures(t) {
		sources[strings.TrimSuffix(name, ".pcap")] = textOf(t, captureDiagram(t, name))
	}
	if out, err := checkPlantUML(t, plantuml, sources); err != nil {
		t.Errorf("PlantUML: %v\n%s", err, out)
	}
}
