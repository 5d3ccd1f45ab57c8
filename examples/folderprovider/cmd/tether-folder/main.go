// Command tether-folder is Tether with its built-in providers and the
// folder provider: PROVIDERS=folder,sim enables it.
package main

import (
	"example.com/folderprovider"
	"github.com/tetherhq/tether/provider"
	"github.com/tetherhq/tether/server"
)

func main() {
	server.Main(server.Options{Providers: []provider.Registration{folder.Registration}})
}
