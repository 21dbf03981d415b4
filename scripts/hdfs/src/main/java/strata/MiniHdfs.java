package strata;

import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * Starts one NameNode and one DataNode on 127.0.0.1 and prints
 * "NAMENODE=127.0.0.1:PORT" once they accept clients. It runs until it is
 * sent SIGTERM, then shuts the cluster down cleanly.
 *
 * Usage: MiniHdfs BASE_DIR NAMENODE_PORT
 */
public final class MiniHdfs {
  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: MiniHdfs BASE_DIR NAMENODE_PORT");
      System.exit(2);
    }
    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(args[0]).getAbsolutePath());
    // Tests connect as whatever user runs them.
    conf.setBoolean("dfs.permissions.enabled", false);
    // Small blocks so multi-block files are cheap to test.
    conf.setLong("dfs.blocksize", 4L << 20);
    conf.setInt("dfs.replication", 1);
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
        .nameNodePort(Integer.parseInt(args[1]))
        .numDataNodes(1)
        .format(true)
        .build();
    cluster.waitActive();
    System.out.println("NAMENODE=127.0.0.1:" + cluster.getNameNodePort());
    System.out.flush();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
    Thread.currentThread().join();
  }
}
