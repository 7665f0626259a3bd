# The base of the locally built images: the debootstrap root file system (imported by build.sh as
# ROOTFS), with the suite's updates and security fixes, apt kept lean as in Debian's slim images.
ARG ROOTFS
FROM ${ROOTFS}
ARG MIRROR
ARG SECURITY
ARG SUITE
ENV LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
RUN printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
        "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" "$SECURITY" "$SUITE" > /etc/apt/sources.list \
    && printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\nAcquire::Languages "none";\n' \
        > /etc/apt/apt.conf.d/90-lean \
    && printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
        > /etc/dpkg/dpkg.cfg.d/90-lean \
    && apt-get update && apt-get -y upgrade \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log
CMD ["bash"]
