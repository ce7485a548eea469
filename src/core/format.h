/* The f2fs on-disk format, as f2fs-tools 1.15 writes it.  Every offset the code relies on
 * is a packed structure here, checked at compile time against docs/FORMAT.md; nothing
 * else in f2fuse hard-codes an on-disk offset.  All fields are little-endian (the code
 * reads them through le16/le32/le64 helpers so that a big-endian host would also work). */
#ifndef F2FUSE_CORE_FORMAT_H
#define F2FUSE_CORE_FORMAT_H

#include <assert.h>
#include <endian.h>
#include <stdint.h>

#define F2FS_SUPER_MAGIC        0xF2F52010u
#define F2FS_XATTR_MAGIC        0xF2F52011u
#define F2FS_BLKSIZE            4096u
#define F2FS_LOG_BLKSIZE        12u
#define F2FS_LOG_BLOCKS_PER_SEG 9u
#define F2FS_BLOCKS_PER_SEG     512u
#define F2FS_SUPER_OFFSET       1024u /* byte offset of each superblock copy in its block */
#define F2FS_MAX_EXTENSION      64
#define F2FS_EXTENSION_LEN      8
#define F2FS_MAX_DEVICES        8
#define F2FS_MAX_QUOTAS         3
#define F2FS_NAME_LEN           255
#define F2FS_MAX_SYMLINK        4095 /* longest symlink target Linux allows */

#define F2FS_NODE_INO          1u
#define F2FS_META_INO          2u
#define F2FS_RESERVED_NODE_NUM 3u

/* superblock feature bits */
#define F2FS_FEATURE_ENCRYPT               0x0001u
#define F2FS_FEATURE_BLKZONED              0x0002u
#define F2FS_FEATURE_ATOMIC_WRITE          0x0004u
#define F2FS_FEATURE_EXTRA_ATTR            0x0008u
#define F2FS_FEATURE_PRJQUOTA              0x0010u
#define F2FS_FEATURE_INODE_CHKSUM          0x0020u
#define F2FS_FEATURE_FLEXIBLE_INLINE_XATTR 0x0040u
#define F2FS_FEATURE_QUOTA_INO             0x0080u
#define F2FS_FEATURE_INODE_CRTIME          0x0100u
#define F2FS_FEATURE_LOST_FOUND            0x0200u
#define F2FS_FEATURE_VERITY                0x0400u
#define F2FS_FEATURE_SB_CHKSUM             0x0800u
#define F2FS_FEATURE_CASEFOLD              0x1000u
#define F2FS_FEATURE_COMPRESSION           0x2000u
#define F2FS_FEATURE_RO                    0x4000u

struct f2fs_device {
    uint8_t path[64];
    uint32_t total_segments;
} __attribute__((packed));

struct f2fs_super_block {
    uint32_t magic;
    uint16_t major_ver;
    uint16_t minor_ver;
    uint32_t log_sectorsize;
    uint32_t log_sectors_per_block;
    uint32_t log_blocksize;
    uint32_t log_blocks_per_seg;
    uint32_t segs_per_sec;
    uint32_t secs_per_zone;
    uint32_t checksum_offset;
    uint64_t block_count;
    uint32_t section_count;
    uint32_t segment_count;
    uint32_t segment_count_ckpt;
    uint32_t segment_count_sit;
    uint32_t segment_count_nat;
    uint32_t segment_count_ssa;
    uint32_t segment_count_main;
    uint32_t segment0_blkaddr;
    uint32_t cp_blkaddr;
    uint32_t sit_blkaddr;
    uint32_t nat_blkaddr;
    uint32_t ssa_blkaddr;
    uint32_t main_blkaddr;
    uint32_t root_ino;
    uint32_t node_ino;
    uint32_t meta_ino;
    uint8_t uuid[16];
    uint16_t volume_name[512];
    uint32_t extension_count;
    uint8_t extension_list[F2FS_MAX_EXTENSION][F2FS_EXTENSION_LEN];
    uint32_t cp_payload;
    uint8_t version[256];
    uint8_t init_version[256];
    uint32_t feature;
    uint8_t encryption_level;
    uint8_t encrypt_pw_salt[16];
    struct f2fs_device devs[F2FS_MAX_DEVICES];
    uint32_t qf_ino[F2FS_MAX_QUOTAS];
    uint8_t hot_ext_count;
    uint16_t s_encoding;
    uint16_t s_encoding_flags;
    uint8_t reserved[306];
    uint32_t crc;
} __attribute__((packed));
static_assert(sizeof(struct f2fs_super_block) == 3072, "superblock size");
static_assert(__builtin_offsetof(struct f2fs_super_block, feature) == 2180, "sb feature");
static_assert(__builtin_offsetof(struct f2fs_super_block, crc) == 3068, "sb crc");

/* checkpoint flags */
#define CP_UMOUNT_FLAG           0x0001u
#define CP_ORPHAN_PRESENT_FLAG   0x0002u
#define CP_COMPACT_SUM_FLAG      0x0004u
#define CP_ERROR_FLAG            0x0008u
#define CP_FSCK_FLAG             0x0010u
#define CP_FASTBOOT_FLAG         0x0020u
#define CP_CRC_RECOVERY_FLAG     0x0040u
#define CP_NAT_BITS_FLAG         0x0080u
#define CP_TRIMMED_FLAG          0x0100u
#define CP_NOCRC_RECOVERY_FLAG   0x0200u
#define CP_LARGE_NAT_BITMAP_FLAG 0x0400u
#define CP_QUOTA_NEED_FSCK_FLAG  0x0800u
#define CP_DISABLED_FLAG         0x1000u
#define CP_DISABLED_QUICK_FLAG   0x2000u
#define CP_RESIZEFS_FLAG         0x4000u

#define MAX_ACTIVE_LOGS      16
#define MAX_ACTIVE_NODE_LOGS 8
#define MAX_ACTIVE_DATA_LOGS 8
#define CP_CHKSUM_OFFSET     4092u
#define CP_MIN_CHKSUM_OFFSET 192u

struct f2fs_checkpoint {
    uint64_t checkpoint_ver;
    uint64_t user_block_count;
    uint64_t valid_block_count;
    uint32_t rsvd_segment_count;
    uint32_t overprov_segment_count;
    uint32_t free_segment_count;
    uint32_t cur_node_segno[MAX_ACTIVE_NODE_LOGS];
    uint16_t cur_node_blkoff[MAX_ACTIVE_NODE_LOGS];
    uint32_t cur_data_segno[MAX_ACTIVE_DATA_LOGS];
    uint16_t cur_data_blkoff[MAX_ACTIVE_DATA_LOGS];
    uint32_t ckpt_flags;
    uint32_t cp_pack_total_block_count;
    uint32_t cp_pack_start_sum;
    uint32_t valid_node_count;
    uint32_t valid_inode_count;
    uint32_t next_free_nid;
    uint32_t sit_ver_bitmap_bytesize;
    uint32_t nat_ver_bitmap_bytesize;
    uint32_t checksum_offset;
    uint64_t elapsed_time;
    uint8_t alloc_type[MAX_ACTIVE_LOGS];
    uint8_t sit_nat_version_bitmap[];
} __attribute__((packed));
static_assert(sizeof(struct f2fs_checkpoint) == 192, "checkpoint header size");
static_assert(__builtin_offsetof(struct f2fs_checkpoint, ckpt_flags) == 132, "cp flags");

/* NAT */
struct f2fs_nat_entry {
    uint8_t version;
    uint32_t ino;
    uint32_t block_addr;
} __attribute__((packed));
#define NAT_ENTRY_PER_BLOCK (F2FS_BLKSIZE / sizeof(struct f2fs_nat_entry))
static_assert(sizeof(struct f2fs_nat_entry) == 9, "nat entry");
static_assert(NAT_ENTRY_PER_BLOCK == 455, "nat entries per block");

/* SIT */
#define SIT_VBLOCK_MAP_SIZE 64
struct f2fs_sit_entry {
    uint16_t vblocks; /* type << 10 | valid block count */
    uint8_t valid_map[SIT_VBLOCK_MAP_SIZE];
    uint64_t mtime;
} __attribute__((packed));
#define SIT_ENTRY_PER_BLOCK (F2FS_BLKSIZE / sizeof(struct f2fs_sit_entry))
#define SIT_VBLOCKS_SHIFT   10
#define SIT_VBLOCKS_MASK    ((1u << SIT_VBLOCKS_SHIFT) - 1)
static_assert(sizeof(struct f2fs_sit_entry) == 74, "sit entry");
static_assert(SIT_ENTRY_PER_BLOCK == 55, "sit entries per block");

/* summaries and journals */
#define ENTRIES_IN_SUM      512
#define SUM_ENTRY_SIZE      7
#define SUM_JOURNAL_SIZE    507
#define SUM_FOOTER_SIZE     5
#define NAT_JOURNAL_ENTRIES 38
#define SIT_JOURNAL_ENTRIES 6
#define SUM_TYPE_NODE       1
#define SUM_TYPE_DATA       0

struct f2fs_summary {
    uint32_t nid;
    uint8_t version;
    uint16_t ofs_in_node;
} __attribute__((packed));

struct nat_journal_entry {
    uint32_t nid;
    struct f2fs_nat_entry ne;
} __attribute__((packed));

struct sit_journal_entry {
    uint32_t segno;
    struct f2fs_sit_entry se;
} __attribute__((packed));

struct f2fs_journal {
    uint16_t n_entries; /* n_nats or n_sits */
    union {
        struct {
            struct nat_journal_entry entries[NAT_JOURNAL_ENTRIES];
            uint8_t reserved[11];
        } __attribute__((packed)) nat;
        struct {
            struct sit_journal_entry entries[SIT_JOURNAL_ENTRIES];
            uint8_t reserved[37];
        } __attribute__((packed)) sit;
        struct {
            uint64_t kbytes_written;
            uint8_t reserved[497];
        } __attribute__((packed)) info;
    };
} __attribute__((packed));
static_assert(sizeof(struct f2fs_journal) == SUM_JOURNAL_SIZE, "journal size");

struct summary_footer {
    uint8_t entry_type;
    uint32_t check_sum;
} __attribute__((packed));

struct f2fs_summary_block {
    struct f2fs_summary entries[ENTRIES_IN_SUM];
    struct f2fs_journal journal;
    struct summary_footer footer;
} __attribute__((packed));
static_assert(sizeof(struct f2fs_summary_block) == F2FS_BLKSIZE, "summary block");

/* node blocks */
#define DEF_ADDRS_PER_INODE      923
#define DEF_NIDS_PER_INODE       5
#define ADDRS_PER_BLOCK          1018
#define NIDS_PER_BLOCK           1018
#define DEF_INLINE_XATTR_ADDRS   50
#define DEF_INLINE_RESERVED_SIZE 1
#define XATTR_NODE_OFFSET        ((1u << 29) - 1) /* footer offset of an xattr node: 0x1FFFFFFF */
#define OFFSET_BIT_SHIFT         3
/* node footer flag bits below the offset */
#define NODE_COLD_BIT  0x1u /* a node of a non-directory */
#define NODE_FSYNC_BIT 0x2u /* the last node an fsync wrote (roll-forward replays up to it) */
#define NODE_DENT_BIT  0x4u /* recovery adds the inode's name (i_name) to its parent (i_pino) */

/* i_inline */
#define F2FS_INLINE_XATTR      0x01
#define F2FS_INLINE_DATA       0x02
#define F2FS_INLINE_DENTRY     0x04
#define F2FS_DATA_EXIST        0x08
#define F2FS_INLINE_DOTS       0x10
#define F2FS_EXTRA_ATTR        0x20
#define F2FS_PIN_FILE          0x40
#define F2FS_COMPRESS_RELEASED 0x80

/* i_advise */
#define FADVISE_ENCRYPT_BIT   0x04
#define FADVISE_ENC_NAME_BIT  0x08 /* i_name holds the name as an encrypted directory stores it */
#define FADVISE_KEEP_SIZE_BIT 0x10
#define FADVISE_VERITY_BIT    0x40

/* i_flags (the on-disk values of FS_*_FL) */
#define F2FS_COMPR_FL       0x00000004u
#define F2FS_SYNC_FL        0x00000008u
#define F2FS_IMMUTABLE_FL   0x00000010u
#define F2FS_APPEND_FL      0x00000020u
#define F2FS_NODUMP_FL      0x00000040u
#define F2FS_NOATIME_FL     0x00000080u
#define F2FS_NOCOMP_FL      0x00000400u
#define F2FS_INDEX_FL       0x00001000u
#define F2FS_DIRSYNC_FL     0x00010000u
#define F2FS_PROJINHERIT_FL 0x20000000u
#define F2FS_CASEFOLD_FL    0x40000000u

#define NULL_ADDR     0u
#define NEW_ADDR      0xFFFFFFFFu
#define COMPRESS_ADDR 0xFFFFFFFEu

struct f2fs_extent {
    uint32_t fofs;
    uint32_t blk;
    uint32_t len;
} __attribute__((packed));

struct f2fs_inode {
    uint16_t i_mode;
    uint8_t i_advise;
    uint8_t i_inline;
    uint32_t i_uid;
    uint32_t i_gid;
    uint32_t i_links;
    uint64_t i_size;
    uint64_t i_blocks;
    uint64_t i_atime;
    uint64_t i_ctime;
    uint64_t i_mtime;
    uint32_t i_atime_nsec;
    uint32_t i_ctime_nsec;
    uint32_t i_mtime_nsec;
    uint32_t i_generation;
    union {
        uint32_t i_current_depth;
        uint16_t i_gc_failures;
    };
    uint32_t i_xattr_nid;
    uint32_t i_flags;
    uint32_t i_pino;
    uint32_t i_namelen;
    uint8_t i_name[F2FS_NAME_LEN];
    uint8_t i_dir_level;
    struct f2fs_extent i_ext;
    union {
        struct {
            uint16_t i_extra_isize;
            uint16_t i_inline_xattr_size;
            uint32_t i_projid;
            uint32_t i_inode_checksum;
            uint64_t i_crtime;
            uint32_t i_crtime_nsec;
            uint64_t i_compr_blocks;
            uint8_t i_compress_algorithm;
            uint8_t i_log_cluster_size;
            uint16_t i_compress_flag;
        } __attribute__((packed));
        uint32_t i_addr[DEF_ADDRS_PER_INODE];
    };
    uint32_t i_nid[DEF_NIDS_PER_INODE];
} __attribute__((packed));
static_assert(sizeof(struct f2fs_inode) == 4072, "inode size");
static_assert(__builtin_offsetof(struct f2fs_inode, i_ext) == 348, "i_ext");
static_assert(__builtin_offsetof(struct f2fs_inode, i_addr) == 360, "i_addr");
static_assert(__builtin_offsetof(struct f2fs_inode, i_inode_checksum) == 368, "checksum");
static_assert(__builtin_offsetof(struct f2fs_inode, i_crtime) == 372, "crtime");
static_assert(__builtin_offsetof(struct f2fs_inode, i_nid) == 4052, "i_nid");
#define F2FS_EXTRA_ISIZE_MAX 36 /* offsetof(i_compress_flag) + 2 */

struct node_footer {
    uint32_t nid;
    uint32_t ino;
    uint32_t flag; /* bit0 cold, bit1 fsync, bit2 dentry mark, bits 3.. node offset */
    uint64_t cp_ver;
    uint32_t next_blkaddr;
} __attribute__((packed));

struct f2fs_node {
    union {
        struct f2fs_inode i;
        uint32_t addr[ADDRS_PER_BLOCK]; /* direct node */
        uint32_t nid[NIDS_PER_BLOCK];   /* indirect node */
    };
    struct node_footer footer;
} __attribute__((packed));
static_assert(sizeof(struct f2fs_node) == F2FS_BLKSIZE, "node block");
static_assert(__builtin_offsetof(struct f2fs_node, footer) == 4072, "node footer");

/* directories */
#define F2FS_SLOT_LEN         8
#define NR_DENTRY_IN_BLOCK    214
#define SIZE_OF_DIR_ENTRY     11
#define SIZE_OF_DENTRY_BITMAP ((NR_DENTRY_IN_BLOCK + 7) / 8)
#define SIZE_OF_RESERVED \
    (F2FS_BLKSIZE -      \
     ((SIZE_OF_DIR_ENTRY + F2FS_SLOT_LEN) * NR_DENTRY_IN_BLOCK + SIZE_OF_DENTRY_BITMAP))
#define MAX_DIR_HASH_DEPTH 63
#define MAX_DIR_BUCKETS    (1u << ((MAX_DIR_HASH_DEPTH / 2) - 1))

struct f2fs_dir_entry {
    uint32_t hash_code;
    uint32_t ino;
    uint16_t name_len;
    uint8_t file_type;
} __attribute__((packed));
static_assert(sizeof(struct f2fs_dir_entry) == SIZE_OF_DIR_ENTRY, "dentry size");

struct f2fs_dentry_block {
    uint8_t dentry_bitmap[SIZE_OF_DENTRY_BITMAP];
    uint8_t reserved[SIZE_OF_RESERVED];
    struct f2fs_dir_entry dentry[NR_DENTRY_IN_BLOCK];
    uint8_t filename[NR_DENTRY_IN_BLOCK][F2FS_SLOT_LEN];
} __attribute__((packed));
static_assert(sizeof(struct f2fs_dentry_block) == F2FS_BLKSIZE, "dentry block");

/* dentry file types */
enum {
    F2FS_FT_UNKNOWN,
    F2FS_FT_REG_FILE,
    F2FS_FT_DIR,
    F2FS_FT_CHRDEV,
    F2FS_FT_BLKDEV,
    F2FS_FT_FIFO,
    F2FS_FT_SOCK,
    F2FS_FT_SYMLINK,
    F2FS_FT_MAX
};

/* xattrs */
struct f2fs_xattr_header {
    uint32_t h_magic;
    uint32_t h_refcount;
    uint32_t h_reserved[4];
} __attribute__((packed));
static_assert(sizeof(struct f2fs_xattr_header) == 24, "xattr header");

struct f2fs_xattr_entry {
    uint8_t e_name_index;
    uint8_t e_name_len;
    uint16_t e_value_size;
    char e_name[];
} __attribute__((packed));
#define XATTR_BLOCK_BODY (F2FS_BLKSIZE - sizeof(struct node_footer)) /* 4072 */

enum {
    F2FS_XATTR_INDEX_USER = 1,
    F2FS_XATTR_INDEX_POSIX_ACL_ACCESS = 2,
    F2FS_XATTR_INDEX_POSIX_ACL_DEFAULT = 3,
    F2FS_XATTR_INDEX_TRUSTED = 4,
    F2FS_XATTR_INDEX_LUSTRE = 5,
    F2FS_XATTR_INDEX_SECURITY = 6,
    F2FS_XATTR_INDEX_ADVISE = 7,
    F2FS_XATTR_INDEX_ENCRYPTION = 9,
    F2FS_XATTR_INDEX_VERITY = 11
};

/* fs-verity (fs/verity, fs/f2fs/verity.c): a verity file keeps its Merkle tree and then its
 * descriptor past EOF, from i_size rounded up to 64 KiB; the xattr of index 11 named "v"
 * says where the descriptor is.  FADVISE_VERITY_BIT marks the file. */
#define F2FS_XATTR_NAME_VERITY  "v"
#define VERITY_METADATA_ALIGN   65536u
#define VERITY_LOCATION_VERSION 1u
#define VERITY_DESC_VERSION     1u
#define VERITY_HASH_SHA256      1u
#define VERITY_HASH_SHA512      2u
#define VERITY_MAX_DIGEST       64u
#define VERITY_MAX_SALT         32u
#define VERITY_MAX_LEVELS       8u
#define VERITY_MAX_DESC_SIZE    16384u /* descriptor plus built-in signature */
struct verity_location {
    uint32_t version; /* VERITY_LOCATION_VERSION */
    uint32_t size;    /* of the descriptor, signature included */
    uint64_t pos;     /* byte offset of the descriptor in the file */
} __attribute__((packed));
static_assert(sizeof(struct verity_location) == 16, "verity location size");
struct verity_descriptor {
    uint8_t version;        /* VERITY_DESC_VERSION */
    uint8_t hash_algorithm; /* VERITY_HASH_* */
    uint8_t log_blocksize;  /* of data and tree blocks */
    uint8_t salt_size;
    uint32_t sig_size; /* built-in signature after the descriptor; 0 when hashed */
    uint64_t data_size;
    uint8_t root_hash[VERITY_MAX_DIGEST];
    uint8_t salt[VERITY_MAX_SALT];
    uint8_t reserved[144]; /* zeros */
} __attribute__((packed));
static_assert(sizeof(struct verity_descriptor) == 256, "verity descriptor size");

/* f2fs's compact POSIX ACL encoding (acl.h) */
#define F2FS_ACL_VERSION 0x0001u
struct f2fs_acl_entry {
    uint16_t e_tag;
    uint16_t e_perm;
    uint32_t e_id;
} __attribute__((packed));
struct f2fs_acl_entry_short {
    uint16_t e_tag;
    uint16_t e_perm;
} __attribute__((packed));

/* Quota files (the quota system inodes sb.qf_ino[]): the kernel's QFMT_VFS_V1 format, a
 * radix tree of 1 KiB quota blocks over the file.  Block 0 holds the header and the info,
 * block 1 the tree's root; four levels of 256 block numbers (one byte of the id each) lead to
 * a data block of up to 14 entries, shared by any ids. */
#define QUOTA_BLKSIZE      1024u
#define QUOTA_TREE_ROOT    1u
#define QUOTA_TREE_DEPTH   4
#define QUOTA_REFS_PER_BLK (QUOTA_BLKSIZE / 4)
#define QUOTA_VERSION      1u
#define QUOTA_MAGIC_USR    0xd9c01f11u
#define QUOTA_MAGIC_GRP    0xd9c01927u
#define QUOTA_MAGIC_PRJ    0xd9c03f14u
#define QUOTA_DEF_GRACE    604800u /* 7 days: mkfs's block and inode grace times */
#define QUOTA_LIMIT_UNIT   1024u   /* block limits count 1 KiB; usage is in bytes */

struct quota_header {
    uint32_t magic;
    uint32_t version;
} __attribute__((packed));

struct quota_info {
    uint32_t bgrace; /* seconds over the block soft limit before it binds */
    uint32_t igrace;
    uint32_t flags;
    uint32_t blocks;     /* quota blocks in the file */
    uint32_t free_blk;   /* first of the free blocks' list, 0 = none */
    uint32_t free_entry; /* first of the data blocks with a free entry, 0 = none */
} __attribute__((packed));
static_assert(sizeof(struct quota_header) + sizeof(struct quota_info) == 32, "quota info");

struct quota_data_header {
    uint32_t next_free; /* the free lists' links */
    uint32_t prev_free;
    uint16_t entries; /* entries in use in this data block */
    uint16_t pad1;
    uint32_t pad2;
} __attribute__((packed));
static_assert(sizeof(struct quota_data_header) == 16, "quota data block header");

/* An all-zero entry is a free slot; one that would be all zero is stored with itime = 1. */
struct quota_entry {
    uint32_t id;
    uint32_t pad;
    uint64_t ihardlimit;
    uint64_t isoftlimit;
    uint64_t curinodes;
    uint64_t bhardlimit; /* in QUOTA_LIMIT_UNIT */
    uint64_t bsoftlimit;
    uint64_t curspace; /* bytes */
    uint64_t btime;    /* when the soft limit starts binding (seconds), 0 = not over it */
    uint64_t itime;
} __attribute__((packed));
static_assert(sizeof(struct quota_entry) == 72, "quota entry");
#define QUOTA_ENTRIES_PER_BLK \
    ((QUOTA_BLKSIZE - sizeof(struct quota_data_header)) / sizeof(struct quota_entry)) /* 14 */

/* little-endian accessors */
static inline uint16_t le16(uint16_t v)
{
    return le16toh(v);
}
static inline uint32_t le32(uint32_t v)
{
    return le32toh(v);
}
static inline uint64_t le64(uint64_t v)
{
    return le64toh(v);
}

#endif
