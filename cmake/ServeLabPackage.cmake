# The Debian package (scripts/package runs `cpack -G DEB` in the `package` preset's build): the
# install tree of cmake/ServeLabInstall.cmake under /usr, with Depends from dpkg-shlibdeps (Debian's
# Qt 6, QCustomPlot, QtKeychain, sentencepiece, PCRE2, cpp-httplib and libc's), and the Debian documentation
# lintian asks for (copyright, changelog). lintian reports no error and needs no override; its one
# warning, maintscript-calls-ldconfig, is CPack's postinst for any library under /usr/lib.
set(_gen "${CMAKE_BINARY_DIR}/packaging")
set(SERVELAB_PACKAGE_MAINTAINER "ServeLab maintainers <maintainers@users.noreply.a-seed-7b7fe8eb.example>"
    CACHE STRING "The Debian package's Maintainer")

string(TIMESTAMP _changelog_date "%a, %d %b %Y 00:00:00 +0000" UTC)
if(DEFINED ENV{SOURCE_DATE_EPOCH})
  string(TIMESTAMP _changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
endif()
file(WRITE "${_gen}/changelog"
  "servelab (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
  "  * Packaged by CPack from the ServeLab sources (scripts/package); the\n"
  "    project's own changes are listed in its CHANGELOG.md.\n\n"
  " -- ${SERVELAB_PACKAGE_MAINTAINER}  ${_changelog_date}\n")
add_custom_command(OUTPUT "${_gen}/changelog.gz"
  COMMAND gzip -9nkf "${_gen}/changelog" DEPENDS "${_gen}/changelog" VERBATIM)
add_custom_target(servelab_debian_docs ALL DEPENDS "${_gen}/changelog.gz")
install(FILES "${_gen}/changelog.gz" "${CMAKE_SOURCE_DIR}/packaging/debian/copyright"
        DESTINATION share/doc/servelab COMPONENT servelab)
# The licence texts of what the package bundles from the wheels (packaging/debian/copyright).
file(GLOB _torch_license "${SERVELAB_TORCH_ROOT}/../torch-*.dist-info/licenses/LICENSE"
     "${SERVELAB_TORCH_ROOT}/../torch-*.dist-info/LICENSE")
file(GLOB _cuda_license "${SERVELAB_TORCH_ROOT}/../nvidia_cuda_runtime*.dist-info/licenses/License.txt"
     "${SERVELAB_TORCH_ROOT}/../nvidia_cuda_runtime*.dist-info/License.txt")
if(_torch_license)
  list(GET _torch_license 0 _torch_license)
  install(FILES "${_torch_license}" DESTINATION share/doc/servelab RENAME libtorch-LICENSE COMPONENT servelab)
endif()
if(_cuda_license)
  list(GET _cuda_license 0 _cuda_license)
  install(FILES "${_cuda_license}" DESTINATION share/doc/servelab RENAME nvidia-cuda-LICENSE COMPONENT servelab)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME servelab)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "${SERVELAB_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "lab for watching LLM serving techniques work on a real engine")
set(CPACK_PACKAGE_DESCRIPTION "ServeLab is a desktop lab and command-line engine for serving
large language models on the CPU: KV caching, batching, continuous batching
with paged KV memory, speculative decoding, quantization, multi-LoRA serving
and an OpenAI-compatible HTTP server, each an experiment that runs on a real
model and charts what it measures. The built-in model, SmolLM2-135M-Instruct,
is included; any GGUF file or Hugging Face GPT-2 or Llama-family folder can be
opened. The engine runs on libtorch's CPU backend, which the package carries.")
set(CPACK_PACKAGE_FILE_NAME "servelab_${PROJECT_VERSION}_amd64")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
# Depends from the ELF files' NEEDED entries (dpkg-shlibdeps); the bundled libtorch libraries are
# private ones (dpkg-shlibdeps -l: the folders they were installed from).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${_torch_dirs})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
# gzip rather than xz: xz takes minutes over libtorch_cpu.so (450 MB) on two cores.
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
# share/mime and the icon cache are refreshed by Debian's triggers (shared-mime-info, hicolor).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "shared-mime-info, hicolor-icon-theme")
set(CPACK_COMPONENTS_ALL servelab data torch)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
include(CPack)
