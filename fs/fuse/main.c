/* main.c — the ckptfs executable: everything is in ckptfs_main (fs/fuse/daemon.c). */
#include "fs/ckptfs.h"

int main(int argc, char **argv)
{
	return ckptfs_main(argc, argv);
}
