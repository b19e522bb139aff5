# Installation and the Debian package (`cpack -G DEB` in a build directory,
# or `cmake --build BUILD --target package`).
#
# What goes where, for the package (prefix /usr):
#   /usr/sbin/gptd, /usr/bin/gptctl              (install rules in CMakeLists.txt)
#   /usr/lib/systemd/system/gptd.service        ExecStart rewritten to the installed gptd
#   /usr/lib/sysusers.d/gptd.conf, /usr/lib/tmpfiles.d/gptd.conf
#   /etc/gptd/gptd.conf                         a conffile (gptd reads this path)
#   /usr/share/gptd/jobs/                        the example jobs
#   /usr/share/gptd/grafana/, prometheus/        a Grafana dashboard, Prometheus alert rules
#   /usr/share/man/man{1,5,8}/                   gptctl(1), gptd.conf(5), gptd-job(5), gptd-snapshot(5), gptd(8)
#   /usr/share/bash-completion/completions/gptctl, gptd
#   /usr/share/zsh/vendor-completions/_gptd      zsh completion of gptd and gptctl
#
# gptd-job(5) is generated at build time from the job-spec table by
# packaging/gen_jobman.c; the other pages are written by hand in
# packaging/man/. The runtime dependencies are declared by hand: CUDA
# libraries are only recommended, so the package installs on CPU hosts.

set(GPTD_PKG_DIR ${CMAKE_SOURCE_DIR}/packaging)
set(GPTD_MAN_OUT ${CMAKE_BINARY_DIR}/man)

# --- man pages ---------------------------------------------------------------
add_executable(gen_jobman ${GPTD_PKG_DIR}/gen_jobman.c)
gptd_target(gen_jobman)
target_link_libraries(gen_jobman PRIVATE gptproto)

add_custom_command(OUTPUT ${GPTD_MAN_OUT}/gptd-job.5
                   COMMAND ${CMAKE_COMMAND} -E make_directory ${GPTD_MAN_OUT}
                   COMMAND gen_jobman ${GPTD_MAN_OUT}/gptd-job.5
                   DEPENDS gen_jobman
                   COMMENT "Generating gptd-job(5) from the job-spec table")

# Pages go into the package gzip-compressed (-n: no name or time stamp, so
# the package is reproducible), as Debian's policy asks.
set(GPTD_MAN_PAGES ${GPTD_PKG_DIR}/man/gptd.8 ${GPTD_PKG_DIR}/man/gptctl.1
                   ${GPTD_PKG_DIR}/man/gptd.conf.5 ${GPTD_MAN_OUT}/gptd-job.5
                   ${GPTD_PKG_DIR}/man/gptd-snapshot.5)
set(GPTD_MAN_GZ)
foreach(page ${GPTD_MAN_PAGES})
  get_filename_component(name ${page} NAME)
  set(gz ${GPTD_MAN_OUT}/gz/${name}.gz)
  add_custom_command(OUTPUT ${gz}
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${GPTD_MAN_OUT}/gz
                     COMMAND ${CMAKE_COMMAND} -E copy ${page} ${GPTD_MAN_OUT}/gz/${name}
                     COMMAND gzip -9nf ${GPTD_MAN_OUT}/gz/${name}
                     DEPENDS ${page})
  list(APPEND GPTD_MAN_GZ ${gz})
  string(REGEX MATCH "[0-9]$" section ${name})
  install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(man ALL DEPENDS ${GPTD_MAN_GZ})

# --- systemd and configuration ---------------------------------------------
# The unit names /usr/sbin/gptd; an install under another prefix gets the
# path it installed gptd to. Done at install time, where CMAKE_INSTALL_PREFIX
# is the prefix really used (cpack sets /usr).
install(CODE "
  set(_sbin \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SBINDIR}\")
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_SBINDIR}\")
    set(_sbin \"${CMAKE_INSTALL_SBINDIR}\")
  endif()
  file(READ \"${CMAKE_SOURCE_DIR}/systemd/gptd.service\" _unit)
  string(REPLACE \"ExecStart=/usr/sbin/gptd\" \"ExecStart=\${_sbin}/gptd\" _unit \"\${_unit}\")
  file(WRITE \"${CMAKE_BINARY_DIR}/systemd/gptd.service\" \"\${_unit}\")
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES \"${CMAKE_BINARY_DIR}/systemd/gptd.service\")
")
install(FILES ${CMAKE_SOURCE_DIR}/systemd/gptd.sysusers DESTINATION lib/sysusers.d
        RENAME gptd.conf)
install(FILES ${CMAKE_SOURCE_DIR}/systemd/gptd.tmpfiles DESTINATION lib/tmpfiles.d
        RENAME gptd.conf)
# gptd reads /etc/gptd/gptd.conf whatever the prefix (CONFIG_FILE_DEFAULT).
install(FILES ${CMAKE_SOURCE_DIR}/etc/gptd.conf DESTINATION /etc/gptd)
file(GLOB GPTD_EXAMPLE_JOBS ${CMAKE_SOURCE_DIR}/etc/jobs/*.json ${CMAKE_SOURCE_DIR}/etc/jobs/*.md)
install(FILES ${GPTD_EXAMPLE_JOBS} DESTINATION ${CMAKE_INSTALL_DATADIR}/gptd/jobs)
install(FILES ${CMAKE_SOURCE_DIR}/etc/grafana/gptd-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/gptd/grafana)
install(FILES ${CMAKE_SOURCE_DIR}/etc/prometheus/gptd-alerts.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/gptd/prometheus)
install(FILES ${GPTD_PKG_DIR}/gptctl.bash-completion
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME gptctl)
install(FILES ${GPTD_PKG_DIR}/gptd.bash-completion
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME gptd)
# One zsh completion for both programs (its #compdef line names them), in
# the folder Debian's zsh puts on every user's fpath.
install(FILES ${GPTD_PKG_DIR}/gptd.zsh-completion
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions RENAME _gptd)

# --- the Debian package -------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gptd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "gptd maintainers <gptd@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPT training daemon and client")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "GPT training daemon and client\n"
    "gptd trains GPT models on GPU clusters with NCCL, or on plain CPUs with\n"
    "OpenBLAS and a TCP ring. It runs a job queue behind a control socket;\n"
    "gptctl submits jobs, follows their logs and manages snapshots.")
# What gptd and gptctl link (see `ldd`); CUDA is optional at run time.
set(GPTD_DEB_DEPENDS
    "libc6 (>= 2.34)" "libuv1 (>= 1.44)" "libjansson4 (>= 2.14)" "libsqlite3-0 (>= 3.35)"
    "libopenblas0 | libopenblas0-pthread | libopenblas0-openmp | libopenblas0-serial"
    "libssl3" "libgomp1" "zlib1g" "libmicrohttpd12")
if(YAML_FOUND)
  list(APPEND GPTD_DEB_DEPENDS "libyaml-0-2")
endif()
if(SYSTEMD_FOUND)
  list(APPEND GPTD_DEB_DEPENDS "libsystemd0")
endif()
list(JOIN GPTD_DEB_DEPENDS ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bash-completion")
if(TARGET gptcuda)
  # NVIDIA's repository names for the runtime libraries gptd was linked to.
  set(_cuv "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS
         ", cuda-cudart-${_cuv}, libcublas-${_cuv}, libnccl2")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nvidia-driver | nvidia-open")
endif()
configure_file(${GPTD_PKG_DIR}/deb/postinst ${CMAKE_BINARY_DIR}/deb/postinst COPYONLY)
configure_file(${GPTD_PKG_DIR}/deb/prerm ${CMAKE_BINARY_DIR}/deb/prerm COPYONLY)
configure_file(${GPTD_PKG_DIR}/deb/postrm ${CMAKE_BINARY_DIR}/deb/postrm COPYONLY)
file(WRITE ${CMAKE_BINARY_DIR}/deb/conffiles "/etc/gptd/gptd.conf\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/deb/conffiles ${CMAKE_BINARY_DIR}/deb/postinst
    ${CMAKE_BINARY_DIR}/deb/prerm ${CMAKE_BINARY_DIR}/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
