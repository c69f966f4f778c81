/*
 * /init of the module guest (cli/tests/guest_modules.rs): PID 1 of Debian's arm64 kernel
 * loads two of that kernel's own modules with finit_module(2) and unloads them with
 * delete_module(2), so that the second is placed where the first was:
 *
 *   load dummy.ko     its init creates dummy0 (the kernel calls dummy_setup, dummy_dev_init…)
 *   print its sections, unload it (dummy_cleanup_module, dummy_dev_uninit…)
 *   load ifb.ko       at the range dummy.ko left (two ifb devices)
 *   print its sections, unload it
 *   reboot(RB_POWER_OFF)
 *
 * Each module's section addresses (/sys/module/NAME/sections/, the kernel's own account) are
 * printed as `MOD NAME SECTION ADDRESS`: the test places the .ko's functions by them.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

NOIPA static void say(const char *line)
{
    (void)!write(1, line, strlen(line));
}

NOIPA static int load(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = (int)syscall(SYS_finit_module, fd, "", 0);
    close(fd);
    return r;
}

NOIPA static int unload(const char *name)
{
    return (int)syscall(SYS_delete_module, name, O_NONBLOCK);
}

NOIPA static void sections(const char *name)
{
    char dir[128], path[400], value[64], line[512];
    snprintf(dir, sizeof dir, "/sys/module/%s/sections", name);
    DIR *d = opendir(dir);
    if (!d) {
        say("MOD cannot list sections\n");
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || strcmp(e->d_name, "..") == 0))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, value, sizeof value - 1);
        close(fd);
        if (n <= 0)
            continue;
        value[n] = 0;
        value[strcspn(value, "\n")] = 0;
        snprintf(line, sizeof line, "MOD %.40s %.200s %.60s\n", name, e->d_name, value);
        say(line);
    }
    closedir(d);
}

NOIPA static void one(const char *path, const char *name)
{
    char line[128];
    int r = load(path);
    snprintf(line, sizeof line, "MOD loaded %s %d\n", name, r);
    say(line);
    sections(name);
    r = unload(name);
    snprintf(line, sizeof line, "MOD unloaded %s %d\n", name, r);
    say(line);
}

int main(void)
{
    (void)!mount("sysfs", "/sys", "sysfs", 0, 0);
    one("/dummy.ko", "dummy");
    one("/ifb.ko", "ifb");
    say("MOD done\n");
    reboot(RB_POWER_OFF);
    return 0;
}
