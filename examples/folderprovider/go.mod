// A provider kept outside Tether's module, as in a repository of its own:
// it imports only Tether's public packages. The replace points at this
// checkout; a repository of its own requires a released version instead.
module example.com/folderprovider

go 1.26.8

require github.com/tetherhq/tether v0.0.0

replace github.com/tetherhq/tether => ../..
