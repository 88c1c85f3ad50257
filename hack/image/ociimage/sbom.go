package ociimage

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The SBOM is SPDX 2.3 JSON, written from the build information the Go
// linker embeds in the binary (what `go version -m` prints): the modules
// actually linked in, at their versions, with the Go toolchain and the
// build settings. It needs no tool and no network, and cannot list a
// module of go.mod that the binary does not contain.

// SPDX is the part of an SPDX 2.3 document the SBOM fills in.
type SPDX struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      SPDXCreationInfo   `json:"creationInfo"`
	Packages          []SPDXPackage      `json:"packages"`
	Relationships     []SPDXRelationship `json:"relationships"`
}

// SPDXCreationInfo says when and by what the document was made.
type SPDXCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// SPDXPackage is one Go module, the toolchain's standard library, or the
// binary's main module.
type SPDXPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	CopyrightText    string            `json:"copyrightText"`
	Checksums        []SPDXChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []SPDXExternalRef `json:"externalRefs,omitempty"`
	Comment          string            `json:"comment,omitempty"`
}

// SPDXChecksum is a package's checksum.
type SPDXChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

// SPDXExternalRef is a package's purl.
type SPDXExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

// SPDXRelationship links the document, the binary and its modules.
type SPDXRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// SBOMName is the SBOM's file name for a version and platform.
func SBOMName(version string, p v1.Platform) string {
	return "kargo-latch-" + version + "." + p.OS + "-" + p.Architecture + ".spdx.json"
}

// SBOM describes the binary built from src for p.
func SBOM(src Source, p v1.Platform, binaryPath string) ([]byte, error) {
	info, err := buildinfo.ReadFile(binaryPath)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(binaryPath)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	var settings []string
	for _, s := range info.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	binary := SPDXPackage{
		Name: info.Main.Path, SPDXID: "SPDXRef-Package-kargo-latch", VersionInfo: src.Version,
		DownloadLocation: downloadLocation(src),
		LicenseConcluded: License, LicenseDeclared: License, CopyrightText: "NOASSERTION",
		Checksums:    []SPDXChecksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(sum[:])}},
		ExternalRefs: []SPDXExternalRef{purl(info.Main.Path, src.Version)},
		Comment: fmt.Sprintf("The binary %s of the image for %s, revision %s, built with %s: %s",
			Entrypoint, p, revisionSaid(src), info.GoVersion, strings.Join(settings, " ")),
	}
	doc := SPDX{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: "kargo-latch-" + src.Version + "-" + p.OS + "-" + p.Architecture,
		// Unique per binary, and the same for the same binary.
		DocumentNamespace: SourceURL + "/spdx/" + src.Version + "/" + p.OS + "-" + p.Architecture + "/" + hex.EncodeToString(sum[:]),
		CreationInfo: SPDXCreationInfo{
			Created:  src.Created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: kargo-latch-hack-image (Go build information, debug/buildinfo)"},
		},
		Packages: []SPDXPackage{binary, stdlib(info.GoVersion)},
		Relationships: []SPDXRelationship{
			{"SPDXRef-DOCUMENT", "DESCRIBES", binary.SPDXID},
			{binary.SPDXID, "DEPENDS_ON", "SPDXRef-Package-stdlib"},
		},
	}
	for i, dep := range info.Deps {
		if dep.Replace != nil {
			dep = dep.Replace
		}
		id := fmt.Sprintf("SPDXRef-Package-module-%d", i+1)
		doc.Packages = append(doc.Packages, module(dep.Path, dep.Version, id))
		doc.Relationships = append(doc.Relationships, SPDXRelationship{binary.SPDXID, "DEPENDS_ON", id})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return append(out, '\n'), err
}

// downloadLocation is where the binary's source is: the commit, unless the
// work tree had changes, when no place holds it.
func downloadLocation(src Source) string {
	if src.Dirty() {
		return "NOASSERTION"
	}
	return "git+" + SourceURL + "@" + src.Revision
}

// revisionSaid is the revision, and whether the work tree differed from it.
func revisionSaid(src Source) string {
	if src.Dirty() {
		return src.Revision + " (the commit plus the work tree's changes, which no commit holds)"
	}
	return src.Revision
}

func module(path, version, id string) SPDXPackage {
	return SPDXPackage{
		Name: path, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
		ExternalRefs: []SPDXExternalRef{purl(path, version)},
	}
}

// stdlib is the toolchain's standard library: versionInfo as Go names its
// versions (go1.26.8), the purl with the version alone (1.26.8), as purl's
// golang type and the vulnerability databases write it.
func stdlib(goVersion string) SPDXPackage {
	pkg := module("stdlib", goVersion, "SPDXRef-Package-stdlib")
	// A toolchain with experiments says so after a space: "go1.26.8 X:…".
	release, _, _ := strings.Cut(goVersion, " ")
	pkg.ExternalRefs = []SPDXExternalRef{purl("stdlib", strings.TrimPrefix(release, "go"))}
	return pkg
}

// purl is a Go module's package URL (pkg:golang/…@version).
func purl(path, version string) SPDXExternalRef {
	return SPDXExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
		ReferenceLocator: "pkg:golang/" + path + "@" + version}
}
