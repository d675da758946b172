package io.kstage.iceberg;

import java.io.Closeable;
import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.LoadContext;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.catalog.ViewCatalog;
import org.apache.iceberg.hadoop.Configurable;
import org.apache.iceberg.view.View;
import org.apache.iceberg.view.ViewBuilder;

/**
 * An Iceberg catalog (Spark's {@code catalog-impl}) that wraps another one and fences the
 * commits of the tables it loads (see {@link Fence}). The wrapped catalog is built by
 * Iceberg from the same properties, with {@code kstage.delegate-type} as its {@code type}
 * ({@code jdbc}, {@code rest}) or {@code kstage.delegate-impl} as its {@code catalog-impl}.
 * It must support namespaces and views (Spark's SparkCatalog asks for both), as the JDBC and
 * REST catalogs do. Everything else (namespaces, views, metadata tables, transactions of
 * CREATE/REPLACE ... AS SELECT) is the wrapped catalog's own. With {@code
 * kstage.metadata-read-retries} below Iceberg's 20, the wrapped catalog's FileIO is {@link
 * BoundedMetadataReads}.
 */
public class FencingCatalog implements Catalog, SupportsNamespaces, ViewCatalog,
    Configurable<Object>, Closeable {
  public static final String DELEGATE_TYPE = "kstage.delegate-type";
  public static final String DELEGATE_IMPL = "kstage.delegate-impl";
  /** The FileIOs {@link BoundedMetadataReads} (a ResolvingFileIO) stands in for. */
  static final Set<String> BOUNDABLE_IO = Set.of("org.apache.iceberg.aws.s3.S3FileIO",
      "org.apache.iceberg.hadoop.HadoopFileIO", "org.apache.iceberg.io.ResolvingFileIO",
      BoundedMetadataReads.class.getName());

  private Object conf;
  private Catalog catalog;
  private SupportsNamespaces namespaces;
  private ViewCatalog views;

  @Override
  public void setConf(Object hadoopConf) {
    this.conf = hadoopConf;
  }

  @Override
  public void initialize(String name, Map<String, String> properties) {
    Map<String, String> props = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    props.putAll(properties);
    props.remove(CatalogProperties.CATALOG_IMPL);
    String type = props.remove(DELEGATE_TYPE);
    String impl = props.remove(DELEGATE_IMPL);
    if ((type == null) == (impl == null)) {
      throw new IllegalArgumentException("kstage fence: catalog " + name + ": set exactly one of "
          + DELEGATE_TYPE + " (jdbc, rest) and " + DELEGATE_IMPL + " (a catalog class)");
    }
    if (BoundedMetadataReads.retries(props) < BoundedMetadataReads.ICEBERG_RETRIES) {
      String io = props.get(CatalogProperties.FILE_IO_IMPL);
      if (io != null && !BOUNDABLE_IO.contains(io)) {
        throw new IllegalArgumentException("kstage fence: catalog " + name + ": "
            + BoundedMetadataReads.RETRIES + " needs Iceberg's S3FileIO, HadoopFileIO or "
            + "ResolvingFileIO as io-impl, not " + io);
      }
      props.put(CatalogProperties.FILE_IO_IMPL, BoundedMetadataReads.class.getName());
    }
    if (type != null) {
      props.put(CatalogUtil.ICEBERG_CATALOG_TYPE, type);
    } else {
      props.put(CatalogProperties.CATALOG_IMPL, impl);
    }
    Catalog built = CatalogUtil.buildIcebergCatalog(name, props, conf);
    if (!(built instanceof SupportsNamespaces) || !(built instanceof ViewCatalog)) {
      throw new IllegalArgumentException("kstage fence: catalog " + name + ": "
          + built.getClass().getName() + " does not support namespaces and views");
    }
    this.catalog = built;
    this.namespaces = (SupportsNamespaces) built;
    this.views = (ViewCatalog) built;
  }

  /** The wrapped catalog. */
  public Catalog delegate() {
    return catalog;
  }

  /** {@code table} with fenced commits (a metadata table, never committed to, as it is). */
  static Table fenced(Table table) {
    if (!(table instanceof BaseTable)) {
      return table;
    }
    BaseTable loaded = (BaseTable) table;
    if (loaded.operations() instanceof Fence) {
      return table;
    }
    return new BaseTable(new Fence(loaded.operations(), loaded.name()), loaded.name(),
        loaded.reporter(), loaded.labels());
  }

  @Override
  public String name() {
    return catalog.name();
  }

  @Override
  public String toString() {
    return "FencingCatalog(" + catalog + ")";
  }

  @Override
  public List<TableIdentifier> listTables(Namespace namespace) {
    return catalog.listTables(namespace);
  }

  @Override
  public Table createTable(TableIdentifier identifier, Schema schema, PartitionSpec spec,
      String location, Map<String, String> properties) {
    return fenced(catalog.createTable(identifier, schema, spec, location, properties));
  }

  @Override
  public Table createTable(TableIdentifier identifier, Schema schema, PartitionSpec spec,
      Map<String, String> properties) {
    return fenced(catalog.createTable(identifier, schema, spec, properties));
  }

  @Override
  public Table createTable(TableIdentifier identifier, Schema schema, PartitionSpec spec) {
    return fenced(catalog.createTable(identifier, schema, spec));
  }

  @Override
  public Table createTable(TableIdentifier identifier, Schema schema) {
    return fenced(catalog.createTable(identifier, schema));
  }

  @Override
  public Transaction newCreateTableTransaction(TableIdentifier identifier, Schema schema,
      PartitionSpec spec, String location, Map<String, String> properties) {
    return catalog.newCreateTableTransaction(identifier, schema, spec, location, properties);
  }

  @Override
  public Transaction newCreateTableTransaction(TableIdentifier identifier, Schema schema,
      PartitionSpec spec, Map<String, String> properties) {
    return catalog.newCreateTableTransaction(identifier, schema, spec, properties);
  }

  @Override
  public Transaction newCreateTableTransaction(TableIdentifier identifier, Schema schema,
      PartitionSpec spec) {
    return catalog.newCreateTableTransaction(identifier, schema, spec);
  }

  @Override
  public Transaction newCreateTableTransaction(TableIdentifier identifier, Schema schema) {
    return catalog.newCreateTableTransaction(identifier, schema);
  }

  @Override
  public Transaction newReplaceTableTransaction(TableIdentifier identifier, Schema schema,
      PartitionSpec spec, String location, Map<String, String> properties, boolean orCreate) {
    return catalog.newReplaceTableTransaction(identifier, schema, spec, location, properties,
        orCreate);
  }

  @Override
  public Transaction newReplaceTableTransaction(TableIdentifier identifier, Schema schema,
      PartitionSpec spec, Map<String, String> properties, boolean orCreate) {
    return catalog.newReplaceTableTransaction(identifier, schema, spec, properties, orCreate);
  }

  @Override
  public Transaction newReplaceTableTransaction(TableIdentifier identifier, Schema schema,
      PartitionSpec spec, boolean orCreate) {
    return catalog.newReplaceTableTransaction(identifier, schema, spec, orCreate);
  }

  @Override
  public Transaction newReplaceTableTransaction(TableIdentifier identifier, Schema schema,
      boolean orCreate) {
    return catalog.newReplaceTableTransaction(identifier, schema, orCreate);
  }

  @Override
  public boolean tableExists(TableIdentifier identifier) {
    return catalog.tableExists(identifier);
  }

  @Override
  public boolean dropTable(TableIdentifier identifier) {
    return catalog.dropTable(identifier);
  }

  @Override
  public boolean dropTable(TableIdentifier identifier, boolean purge) {
    return catalog.dropTable(identifier, purge);
  }

  @Override
  public void renameTable(TableIdentifier from, TableIdentifier to) {
    catalog.renameTable(from, to);
  }

  @Override
  public Table loadTable(TableIdentifier identifier) {
    return fenced(catalog.loadTable(identifier));
  }

  @Override
  public Table loadTable(TableIdentifier identifier, LoadContext context) {
    return fenced(catalog.loadTable(identifier, context));
  }

  @Override
  public void invalidateTable(TableIdentifier identifier) {
    catalog.invalidateTable(identifier);
  }

  @Override
  public Table registerTable(TableIdentifier identifier, String metadataFileLocation) {
    return fenced(catalog.registerTable(identifier, metadataFileLocation));
  }

  @Override
  public Table registerTable(TableIdentifier identifier, String metadataFileLocation,
      boolean overwrite) {
    return fenced(catalog.registerTable(identifier, metadataFileLocation, overwrite));
  }

  @Override
  public TableBuilder buildTable(TableIdentifier identifier, Schema schema) {
    TableBuilder builder = catalog.buildTable(identifier, schema);
    return new TableBuilder() {
      @Override
      public TableBuilder withPartitionSpec(PartitionSpec spec) {
        builder.withPartitionSpec(spec);
        return this;
      }

      @Override
      public TableBuilder withSortOrder(SortOrder sortOrder) {
        builder.withSortOrder(sortOrder);
        return this;
      }

      @Override
      public TableBuilder withLocation(String location) {
        builder.withLocation(location);
        return this;
      }

      @Override
      public TableBuilder withProperties(Map<String, String> properties) {
        builder.withProperties(properties);
        return this;
      }

      @Override
      public TableBuilder withProperty(String key, String value) {
        builder.withProperty(key, value);
        return this;
      }

      @Override
      public Table create() {
        return fenced(builder.create());
      }

      @Override
      public Transaction createTransaction() {
        return builder.createTransaction();
      }

      @Override
      public Transaction replaceTransaction() {
        return builder.replaceTransaction();
      }

      @Override
      public Transaction createOrReplaceTransaction() {
        return builder.createOrReplaceTransaction();
      }
    };
  }

  @Override
  public void createNamespace(Namespace namespace) {
    namespaces.createNamespace(namespace);
  }

  @Override
  public void createNamespace(Namespace namespace, Map<String, String> metadata) {
    namespaces.createNamespace(namespace, metadata);
  }

  @Override
  public List<Namespace> listNamespaces() {
    return namespaces.listNamespaces();
  }

  @Override
  public List<Namespace> listNamespaces(Namespace namespace) {
    return namespaces.listNamespaces(namespace);
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(Namespace namespace) {
    return namespaces.loadNamespaceMetadata(namespace);
  }

  @Override
  public boolean dropNamespace(Namespace namespace) {
    return namespaces.dropNamespace(namespace);
  }

  @Override
  public boolean setProperties(Namespace namespace, Map<String, String> properties) {
    return namespaces.setProperties(namespace, properties);
  }

  @Override
  public boolean removeProperties(Namespace namespace, Set<String> properties) {
    return namespaces.removeProperties(namespace, properties);
  }

  @Override
  public boolean namespaceExists(Namespace namespace) {
    return namespaces.namespaceExists(namespace);
  }

  @Override
  public List<TableIdentifier> listViews(Namespace namespace) {
    return views.listViews(namespace);
  }

  @Override
  public View loadView(TableIdentifier identifier) {
    return views.loadView(identifier);
  }

  @Override
  public View loadView(TableIdentifier identifier, LoadContext context) {
    return views.loadView(identifier, context);
  }

  @Override
  public boolean viewExists(TableIdentifier identifier) {
    return views.viewExists(identifier);
  }

  @Override
  public ViewBuilder buildView(TableIdentifier identifier) {
    return views.buildView(identifier);
  }

  @Override
  public boolean dropView(TableIdentifier identifier) {
    return views.dropView(identifier);
  }

  @Override
  public void renameView(TableIdentifier from, TableIdentifier to) {
    views.renameView(from, to);
  }

  @Override
  public void invalidateView(TableIdentifier identifier) {
    views.invalidateView(identifier);
  }

  @Override
  public View registerView(TableIdentifier identifier, String metadataFileLocation) {
    return views.registerView(identifier, metadataFileLocation);
  }

  @Override
  public void close() throws IOException {
    if (catalog instanceof Closeable) {
      ((Closeable) catalog).close();
    }
  }
}
