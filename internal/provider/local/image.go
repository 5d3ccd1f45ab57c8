package local

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/internal/host/image"
)

// Images: root file systems the operator registers (LOCAL_IMAGES), which a
// create may ask for by name (params.image) instead of the host's system
// folders; internal/host/image checks, unpacks and binds them.

// Image is a root file system the operator registers: Path is a folder,
// or a tarball of one (.tar, .tar.gz or .tgz).
type Image = image.Image

// Image sources, as Info reports them.
const (
	ImageFolder  = image.Folder
	ImageTarball = image.Tarball
)

// imagesDir is the folder under the state folder that holds unpacked
// tarballs.
const imagesDir = "images"

// ParseImages reads LOCAL_IMAGES: comma-separated name=path pairs (see
// image.Parse).
func ParseImages(spec string) ([]Image, error) { return image.Parse(spec) }

// WithImages registers images that creates may ask for by name
// (params.image). New checks each, unpacks the tarballs (or finds them
// unpacked by an earlier start) and starts a sandbox of each; it fails if
// any of that fails.
func WithImages(images ...Image) Option {
	return func(p *Provider) { p.imageList = append(p.imageList, images...) }
}

// registered is a registered image, ready for sandboxes.
type registered struct {
	Image
	// root is the folder that holds the image's root (Image.Root).
	root string
}

// prepareImages checks the registered images and unpacks the tarballs,
// reporting every problem.
func (p *Provider) prepareImages() error {
	p.images = map[string]*registered{}
	var errs []error
	for _, img := range p.imageList {
		if err := img.Check(); err != nil {
			errs = append(errs, fmt.Errorf("local: %w", err))
			continue
		}
		if p.images[img.Name] != nil {
			errs = append(errs, fmt.Errorf("local: image %q is registered twice", img.Name))
			continue
		}
		root, err := img.Root(filepath.Join(p.dir, imagesDir))
		if err != nil {
			errs = append(errs, fmt.Errorf("local: image %q: %w", img.Name, err))
			continue
		}
		p.images[img.Name] = &registered{Image: img, root: root}
	}
	return errors.Join(errs...)
}

// imageNames are the registered images' names, in the order registered.
func (p *Provider) imageNames() []string {
	names := make([]string, 0, len(p.images))
	for _, img := range p.imageList {
		if p.images[img.Name] != nil {
			names = append(names, img.Name)
		}
	}
	return names
}

// imageNote describes the images, for Info.
func (p *Provider) imageNote() string {
	names := p.imageNames()
	if len(names) == 0 {
		return "images: none registered by the operator; every sandbox's root holds the host's system folders"
	}
	return "images (params.image): " + strings.Join(names, ", ") +
		"; a sandbox of one has that image as its root, read-only, with its own /workspace, /tmp, /proc, /dev, /etc/passwd and /etc/group; without params.image the root holds the host's system folders"
}
