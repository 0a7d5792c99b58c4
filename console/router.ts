import { useEffect, useState } from 'preact/hooks';

/** Pages live under /ui/; the query string holds a page's filters, so a URL can be shared. */
export function useLocation(): URL {
  const [url, setUrl] = useState(() => new URL(location.href));
  useEffect(() => {
    const on = () => setUrl(new URL(location.href));
    addEventListener('popstate', on);
    addEventListener('flow:navigate', on);
    return () => {
      removeEventListener('popstate', on);
      removeEventListener('flow:navigate', on);
    };
  }, []);
  return url;
}

export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  dispatchEvent(new Event('flow:navigate'));
}

/** Same-page navigation for plain left clicks on links inside /ui/. */
export function interceptLinks(): void {
  document.addEventListener('click', (e) => {
    const a = (e.target as HTMLElement).closest('a');
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target) return;
    const href = a.getAttribute('href');
    if (!href?.startsWith('/ui/')) return;
    e.preventDefault();
    navigate(href);
  });
}
