# `cmake --install` gives a relocatable tree:
#   bin/servelab, bin/servelab-cli          RUNPATH $ORIGIN/../lib/servelab
#   lib/servelab/                           the libtorch libraries they load (component torch)
#   share/servelab/{gpt2,models}/           the built-in model and GPT-2's tokenizer (component data),
#                                           found relative to the binary (core/util/data_paths.h)
#   share/servelab/adapters/                the built-in model's three adapters (component data;
#                                           core/lora/builtin_adapters.h, docs/adapters.md)
#   share/applications, icons, metainfo, mime/packages, man/man1   the desktop integration
# Components: servelab (binaries, desktop files), data, torch. No RUNPATH in it names the build tree
# or .venv. SERVELAB_INSTALL_TORCH_LINKS=1 in the environment makes the torch component symbolic links
# into the torch package instead of copies (tests/install: the CUDA build's closure is gigabytes).
set(SERVELAB_INSTALL_LIBDIR "lib/servelab")
set(_servelab_programs servelab-cli)
if(TARGET servelab)
  list(APPEND _servelab_programs servelab)
endif()
set_target_properties(${_servelab_programs} PROPERTIES INSTALL_RPATH "$ORIGIN/../${SERVELAB_INSTALL_LIBDIR}")
install(TARGETS ${_servelab_programs} RUNTIME DESTINATION bin COMPONENT servelab)

# The data, as scripts/bootstrap laid it out (the model there is a link into the wheel: install the file).
get_filename_component(_model "${SERVELAB_BUILTIN_MODEL}" REALPATH)
get_filename_component(_model_name "${SERVELAB_BUILTIN_MODEL}" NAME)
install(FILES "${_model}" DESTINATION share/servelab/models RENAME "${_model_name}" COMPONENT data)
install(FILES "${SERVELAB_GPT2_TOKENIZER_DIR}/vocab.json" "${SERVELAB_GPT2_TOKENIZER_DIR}/merges.txt"
        DESTINATION share/servelab/gpt2 COMPONENT data)
install(DIRECTORY "${CMAKE_SOURCE_DIR}/resources/adapters/" DESTINATION share/servelab/adapters COMPONENT data
        FILES_MATCHING PATTERN "adapter_config.json" PATTERN "adapter_model.safetensors" PATTERN "training.json")

# libtorch: the libraries the programs need from the torch package (its lib/ and nvidia/*/lib), found
# by following their NEEDED entries at install time; the system's libraries are the package's
# Depends. With SERVELAB_CUDA=OFF that is libtorch_cpu, libc10, libgomp, and (from a CUDA wheel)
# libcudart and libcupti, which libtorch_cpu needs even without a GPU.
set(_torch_dirs "${SERVELAB_TORCH_ROOT}/lib")
file(GLOB _nv_lib_dirs LIST_DIRECTORIES true "${SERVELAB_TORCH_ROOT}/../nvidia/*/lib")
list(APPEND _torch_dirs ${_nv_lib_dirs})
get_filename_component(_site "${SERVELAB_TORCH_ROOT}/.." ABSOLUTE)
get_filename_component(_site_real "${SERVELAB_TORCH_ROOT}/.." REALPATH)
set(_program_files "")
foreach(_p ${_servelab_programs})
  list(APPEND _program_files "$<TARGET_FILE:${_p}>")
endforeach()
install(CODE "
  file(GET_RUNTIME_DEPENDENCIES
    EXECUTABLES ${_program_files}
    DIRECTORIES ${_torch_dirs}
    RESOLVED_DEPENDENCIES_VAR _deps
    UNRESOLVED_DEPENDENCIES_VAR _missing
    POST_INCLUDE_REGEXES \"^${_site}/\" \"^${_site_real}/\"
    POST_EXCLUDE_REGEXES \".*\")
  if(_missing)
    message(FATAL_ERROR \"libraries not found for the install: \${_missing}\")
  endif()
  set(_dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${SERVELAB_INSTALL_LIBDIR}\")
  file(MAKE_DIRECTORY \"\${_dest}\")
  foreach(_d \${_deps})
    get_filename_component(_real \"\${_d}\" REALPATH)
    get_filename_component(_name \"\${_d}\" NAME)
    # A link left by an earlier install would otherwise be written through, into the torch package.
    file(REMOVE \"\${_dest}/\${_name}\")
    if(\"\$ENV{SERVELAB_INSTALL_TORCH_LINKS}\" STREQUAL \"1\")
      message(STATUS \"Linking: \${_dest}/\${_name}\")
      file(CREATE_LINK \"\${_real}\" \"\${_dest}/\${_name}\" SYMBOLIC)
    else()
      message(STATUS \"Installing: \${_dest}/\${_name}\")
      file(COPY_FILE \"\${_real}\" \"\${_dest}/\${_name}\")
      file(CHMOD \"\${_dest}/\${_name}\" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
      # The wheel's libraries keep their symbol tables: a copy needs only the dynamic ones.
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-unneeded \"\${_dest}/\${_name}\" COMMAND_ERROR_IS_FATAL ANY)
    endif()
  endforeach()
  " COMPONENT torch)

# Desktop integration (component servelab): the .desktop entry, the GGUF MIME type, AppStream
# metainfo, the icon (SVG, and PNGs in the hicolor sizes when rsvg-convert is there), man pages.
set(_pkg "${CMAKE_SOURCE_DIR}/packaging")
set(_gen "${CMAKE_BINARY_DIR}/packaging")
install(FILES "${_pkg}/servelab.desktop" DESTINATION share/applications COMPONENT servelab)
install(FILES "${_pkg}/servelab-mime.xml" DESTINATION share/mime/packages RENAME servelab.xml COMPONENT servelab)
install(FILES "${CMAKE_SOURCE_DIR}/resources/icons/servelab.svg" DESTINATION share/icons/hicolor/scalable/apps
        COMPONENT servelab)
# AppStream: the release date is the version's; screenshots need a public address for
# docs/screenshots (SERVELAB_SCREENSHOT_URL, e.g. a raw-file URL of the repository), none without.
set(SERVELAB_RELEASE_DATE "2026-11-27")
set(SERVELAB_SCREENSHOT_URL "" CACHE STRING "Public address of docs/screenshots/ for AppStream (none: no screenshots)")
set(SERVELAB_METAINFO_SCREENSHOTS "")
if(SERVELAB_SCREENSHOT_URL)
  set(_shots "")
  foreach(_s generate continuous serving quantization)
    set(_default "")
    if(_s STREQUAL "generate")
      set(_default " type=\"default\"")
    endif()
    string(APPEND _shots "\n    <screenshot${_default}><image>${SERVELAB_SCREENSHOT_URL}/${_s}.png</image></screenshot>")
  endforeach()
  set(SERVELAB_METAINFO_SCREENSHOTS "<screenshots>${_shots}\n  </screenshots>")
endif()
configure_file("${_pkg}/servelab.metainfo.xml" "${_gen}/io.github.servelab.ServeLab.metainfo.xml" @ONLY)
install(FILES "${_gen}/io.github.servelab.ServeLab.metainfo.xml" DESTINATION share/metainfo COMPONENT servelab)

# Man pages, gzip -9n (no name or time stamp: the same bytes every build).
set(_man_files "")
foreach(_m servelab servelab-cli)
  configure_file("${_pkg}/man/${_m}.1" "${_gen}/man/${_m}.1" @ONLY)
  add_custom_command(OUTPUT "${_gen}/man/${_m}.1.gz"
    COMMAND gzip -9nkf "${_gen}/man/${_m}.1"
    DEPENDS "${_gen}/man/${_m}.1" VERBATIM)
  list(APPEND _man_files "${_gen}/man/${_m}.1.gz")
endforeach()

# The hicolor PNGs, rendered from the SVG by rsvg-convert (Debian's librsvg2-bin; scripts/package
# installs it). Without it only the scalable icon is installed.
find_program(SERVELAB_RSVG_CONVERT rsvg-convert)
set(_icon_files "")
if(SERVELAB_RSVG_CONVERT)
  foreach(_size 16 24 32 48 64 128 256 512)
    set(_png "${_gen}/icons/hicolor/${_size}x${_size}/apps/servelab.png")
    add_custom_command(OUTPUT "${_png}"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${_gen}/icons/hicolor/${_size}x${_size}/apps"
      COMMAND "${SERVELAB_RSVG_CONVERT}" -w ${_size} -h ${_size} -o "${_png}"
              "${CMAKE_SOURCE_DIR}/resources/icons/servelab.svg"
      DEPENDS "${CMAKE_SOURCE_DIR}/resources/icons/servelab.svg" VERBATIM)
    list(APPEND _icon_files "${_png}")
    install(FILES "${_png}" DESTINATION share/icons/hicolor/${_size}x${_size}/apps COMPONENT servelab)
  endforeach()
endif()
add_custom_target(servelab_desktop_files ALL DEPENDS ${_man_files} ${_icon_files})
install(FILES ${_man_files} DESTINATION share/man/man1 COMPONENT servelab)
