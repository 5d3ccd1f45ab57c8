package http_test

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	tetherhttp "github.com/tetherhq/tether/internal/http"
)

func TestZZProbeRace(t *testing.T) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_ = tetherhttp.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), tetherhttp.Config{}, tetherhttp.Deps{})
		})
	}
	wg.Wait()
}
