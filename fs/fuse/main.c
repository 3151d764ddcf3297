/* main.c — the ckptfs executable: everything is in fs_main (fs/fuse/daemon.c). */
#include "fs/ckptfs.h"

int main(int argc, char **argv)
{
	return fs_main(argc, argv);
}
