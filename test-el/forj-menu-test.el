;;; forj-menu-test.el --- The chat's menu, its keys and its documentation  -*- lexical-binding: t; -*-

;;; Commentary:

;; `forj-menu' driven as a user would, with keys, in a chat on a real
;; worker and a scripted model: it opens on C-c C-m (C-c RET in a
;; terminal) and C-c ?, shows what can act now, grows when a command
;; is defined, and its entries run.  Also: `describe-mode' lists every
;; key of the chat with what it does, docstrings substitute their keys,
;; and Markdown in replies is highlighted without `markdown-mode'.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-menu)
(require 'forj-chat-test)

(defmacro forj-menu-test-in-chat (replies &rest body)
  "Run BODY in a chat shown in the selected window, the model replaying REPLIES.
`root' is the project, `chat' the chat buffer."
  (declare (indent 1) (debug t))
  `(forj-chat-test-with-session '(("a.txt" . "alpha\n")) ,replies
     (save-window-excursion
       (delete-other-windows)
       (switch-to-buffer chat)
       (forj-chat-test--ready-worker root)
       ,@body)))

(defun forj-menu-test--open ()
  "Open the menu with its key; return the commands it offers, then close it."
  (execute-kbd-macro (kbd "C-c C-m"))
  (prog1 (progn
           (should (eq (oref transient--prefix command) 'forj-menu))
           (should (get-buffer-window " *transient*"))
           (mapcar (lambda (suffix) (oref suffix command)) transient--suffixes))
    (transient--emergency-exit)))

(defun forj-menu-test--last-message ()
  "The last line of *Messages*: what the echo area said last."
  (with-current-buffer (messages-buffer)
    (save-excursion
      (goto-char (point-max))
      (skip-chars-backward "\n")
      (buffer-substring-no-properties (line-beginning-position) (point)))))

(defun forj-menu-test--keys (keys)
  "Type KEYS: the menu's key, then KEYS in the menu."
  (execute-kbd-macro (vconcat (kbd "C-c C-m") (kbd keys))))

(ert-deftest forj-test-menu-opens-on-its-keys ()
  "C-c C-m (C-c RET in a terminal) and C-c ? open the menu in a chat."
  (forj-menu-test-in-chat (list (list :text "Hi."))
    (should (eq (key-binding (kbd "C-c C-m")) 'forj-menu))
    (should (eq (key-binding (kbd "C-c RET")) 'forj-menu))
    (should (eq (key-binding (kbd "C-c ?")) 'forj-menu))
    (execute-kbd-macro (kbd "C-c ?"))
    (should (eq (oref transient--prefix command) 'forj-menu))
    (transient--emergency-exit)
    (should-not transient--prefix)))

(defconst forj-menu-test--later-commands
  '(forj-retry forj-continue forj-undo forj-rewind forj-set-model forj-set-mode
    forj-permissions forj-add-context forj-compact forj-resume forj-tasks)
  "Commands the menu offers only once they are defined.")

(ert-deftest forj-test-menu-shows-what-can-act-and-grows-with-commands ()
  "Idle chat: send, no stop; commands not defined have no entry until they are."
  (forj-menu-test-in-chat (list (list :text "Hi."))
    (let ((offered (forj-menu-test--open)))
      (dolist (command '(forj-chat-send forj-chat-set-tools-mode forj-menu-system-prompt forj-save
                         forj-open-chat forj-demo forj-tools-toggle-fold forj-menu-status
                         forj-menu-restart-worker forj-menu-worker-log forj-menu-settings
                         forj-retry forj-continue forj-set-model))
        (should (memq command offered)))
      ;; Nothing runs: no stop, no result to give.
      (should-not (memq 'forj-menu-stop offered))
      (should-not (memq 'forj-tool-result offered))
      ;; Every entry stands for a command that exists.
      (dolist (command offered) (should (commandp command))))
    ;; Undo, rewind and saved chats exist: their entries show.
    (dolist (command '(forj-undo forj-rewind forj-resume))
      (should (memq command (forj-menu-test--open))))
    ;; No unfinished batch waits here.
    (should-not (memq 'forj-recover (forj-menu-test--open)))
    ;; Commands the menu names that are not defined in this Emacs have no
    ;; entry; one of them defined later gets its entry at once.
    (let ((absent (seq-remove #'fboundp forj-menu-test--later-commands)))
      (dolist (command absent)
        (should-not (memq command (forj-menu-test--open))))
      (when absent
        (let ((command (car absent)))
          (unwind-protect
              (progn
                (defalias command (lambda () (interactive) (message "ran")))
                (should (memq command (forj-menu-test--open))))
            (fmakunbound command))
          (should-not (memq command (forj-menu-test--open))))))))

(ert-deftest forj-test-menu-send-and-stop-run ()
  "The menu's send sends the prompt; while the reply streams, its stop stops it."
  (forj-menu-test-in-chat (list (list :text (make-string 400 ?x)))
    (let ((forj-provider-scripted-delay 0.2))
      (goto-char (point-max))
      (insert "Say many x.")
      (forj-menu-test--keys "s")
      (should (eq (forj-session-state forj-session) 'streaming))
      (should (forj-test--wait-for
               (lambda () (string-match-p "## User\n\nSay many x.\n\n## Assistant\n\nx" (buffer-string)))))
      (let ((offered (forj-menu-test--open)))
        (should (memq 'forj-menu-stop offered))
        (should-not (memq 'forj-chat-send offered)))
      (forj-menu-test--keys "k")
      (should (eq (forj-session-state forj-session) 'idle))
      (should (string-match-p "⚠ forj: stopped by the user" (buffer-string))))))

(ert-deftest forj-test-menu-tools-mode-and-system-prompt ()
  "T sets this chat's tools mode; y shows the system prompt the chat sends."
  (forj-menu-test-in-chat (list (list :text "Hi."))
    (forj-menu-test--keys "T parse-only RET")
    (should (eq forj-chat-tools-mode 'parse-only))
    (should (local-variable-p 'forj-chat-tools-mode))
    (should (eq (default-value 'forj-chat-tools-mode) 'enabled))
    (should (string-match-p "tools: parse-only" (forj-chat--header-line)))
    (forj-menu-test--keys "T disabled RET")
    (forj-menu-test--keys "y")
    (with-current-buffer "*forj-system-prompt*"
      (should (string-match-p "Tools are disabled in this conversation" (buffer-string))))
    (kill-buffer "*forj-system-prompt*")))

(ert-deftest forj-test-menu-save-open-worker-and-settings-run ()
  "S saves the chat, O opens a saved one, i/R/l reach the worker, , opens the settings."
  (let ((forj-chat-directory (file-name-as-directory (make-temp-file "forj-chats-" t))))
    (unwind-protect
        (forj-menu-test-in-chat (list (list :text "Hi."))
          (forj-menu-test--keys "S")
          (let ((file buffer-file-name)
                (copy (expand-file-name "copy.md" forj-chat-directory)))
            (should (file-in-directory-p file forj-chat-directory))
            (should (file-exists-p file))
            ;; A saved chat opens from the menu as a chat again.
            (copy-file file copy)
            (forj-menu-test--keys "O copy.md RET")
            (should (equal buffer-file-name copy))
            (should (derived-mode-p 'forj-chat-mode))
            (should (equal (forj-session-root forj-session) root))
            (kill-buffer)
            (switch-to-buffer chat))
          ;; The worker: status, restart, log.
          (let ((worker (forj-worker-get root)))
            (forj-menu-test--keys "i")
            (should (string-match-p "worker ready" (forj-menu-test--last-message)))
            (forj-menu-test--keys "R")
            (should (forj-test--wait-for
                     (lambda () (let ((new (forj-worker-get root)))
                                  (and new (not (eq new worker)) (forj-worker-hello new))))
                     30)))
          (forj-menu-test--keys "l")
          (should (get-buffer-window (forj-worker--log-name root)))
          (forj-menu-test--keys ",")
          (should (derived-mode-p 'Custom-mode))
          (should (string-match-p "forj" (buffer-name)))
          (kill-buffer))
      (delete-directory forj-chat-directory t))))

;;; Keys and documentation

(ert-deftest forj-test-menu-describe-mode-lists-every-key-with-what-it-does ()
  "C-h m in a chat: every key of the chat's map, each with its command's first docstring line."
  (forj-menu-test-in-chat (list (list :text "Hi."))
    (let ((doc (documentation 'forj-chat-mode)))
      (should-not (string-match-p "\\\\\\[\\|\\\\{\\|\\\\<" doc))
      (should (string-match-p "send with C-c C-c" doc))
      (map-keymap-internal
       (lambda (prefix binding)
         (when (keymapp binding)
           (map-keymap-internal
            (lambda (event command)
              (when (commandp command)
                (should (string-match-p
                         (concat "^" (regexp-quote (key-description (vector prefix event)))
                                 " +‘" (symbol-name command) "’: "
                                 (regexp-quote (car (split-string (documentation command) "\n"))))
                         doc))))
            binding)))
       forj-chat-mode-map)
      (should (string-match-p "^C-c RET +‘forj-menu’: Open the menu" doc)))
    ;; What C-h m shows is that text.
    (describe-mode)
    (with-current-buffer (help-buffer)
      (should (string-match-p "C-c C-k +‘forj-chat-stop’: Stop the reply" (buffer-string))))))

(defun forj-menu-test--from-elisp-p (file)
  "Non-nil if FILE is one of forj's own Lisp files (not a test's)."
  (and file
       (equal (file-name-nondirectory (directory-file-name (file-name-directory file))) "elisp")
       (string-prefix-p "forj" (file-name-nondirectory file))))

(ert-deftest forj-test-menu-docstrings-substitute-and-cite-no-requirement-ids ()
  "Docstrings of forj's commands and modes show keys, not raw \\{...}; none cites a requirement ID."
  (should (string-match-p "C-c C-t\t+forj-tools-run" (documentation 'forj-tools-mode)))
  (should-not (string-match-p "{forj-tools-mode-map}" (documentation 'forj-tools-mode)))
  (should-not (string-match-p "[\\{}]" (documentation-property 'forj-tools-fold-chars
                                                              'variable-documentation)))
  (should (string-match-p "\\<f\\> in the buffer shows"
                          (documentation-property 'forj-shell-visible-lines 'variable-documentation)))
  (let ((checked 0))
    (mapatoms
     (lambda (symbol)
       (when (string-prefix-p "forj" (symbol-name symbol))
         (dolist (doc (list (and (fboundp symbol)
                                 ;; An autoload not yet loaded has only its stub's docstring.
                                 (not (autoloadp (symbol-function symbol)))
                                 (forj-menu-test--from-elisp-p (symbol-file symbol 'defun))
                                 (ignore-errors (documentation symbol t)))
                            (and (forj-menu-test--from-elisp-p (symbol-file symbol 'defvar))
                                 (ignore-errors
                                   (documentation-property symbol 'variable-documentation t)))))
           (when (stringp doc)
             (setq checked (1+ checked))
             (should-not (string-match-p "\\<\\(?:N?FR\\|T\\|IT\\)-[A-Z0-9]+-[0-9]+\\|[Ss]eed [0-9]" doc))
             ;; A substitution written with one backslash is lost: the
             ;; reader drops it and the docstring shows the braces raw.
             (should-not (string-match-p "[^\\]{[a-z-]+-map}\\|^{[a-z-]+-map}" doc)))))))
    ;; Every command, option and function of forj's files was read.
    (should (> checked 300))))

;;; Markdown without markdown-mode

(defun forj-menu-test--face-at (text)
  "The face at the start of the first TEXT in the buffer."
  (save-excursion
    (goto-char (point-min))
    (search-forward text)
    (get-text-property (match-beginning 0) 'face)))

(ert-deftest forj-test-chat-reply-markdown-is-highlighted ()
  "Without markdown-mode, a reply's headings, code blocks and inline code get forj's faces."
  (should-not (featurep 'markdown-mode))
  (forj-menu-test-in-chat
      (list (list :text "# Plan\n\nRun `make test` first.\n\n```python\n# not a heading\nx = `y`\n```\n\nThat is **all**."))
    (forj-chat-test--say "Plan?")
    (should (forj-chat-test--wait-idle))
    (font-lock-ensure)
    (should (eq (forj-menu-test--face-at "Plan\n\nRun") 'forj-markdown-heading))
    (should (eq (forj-menu-test--face-at "make test") 'forj-markdown-code))
    (should (eq (forj-menu-test--face-at "`make") 'forj-markdown-fence))
    (should (eq (forj-menu-test--face-at "```python") 'forj-markdown-fence))
    ;; Inside the block: code, neither a heading nor inline code.
    (should (eq (forj-menu-test--face-at "# not a heading") 'forj-markdown-code))
    (should (eq (forj-menu-test--face-at "`y`") 'forj-markdown-code))
    (should (eq (forj-menu-test--face-at "all**") 'forj-markdown-bold))
    ;; forj's role headings keep their own face.
    (should (eq (forj-menu-test--face-at "## Assistant") 'forj-chat-heading))))

(ert-deftest forj-test-chat-markdown-block-fontified-from-its-middle ()
  "A code block refontified from a line inside it is still code, not a heading."
  (with-temp-buffer
    (forj-chat-mode)
    ;; The chat's history is read-only; this stands for a drawn reply.
    (goto-char (point-min))
    (let ((inhibit-read-only t))
      (insert "## Assistant\n\n```sh\necho one\n# comment\necho two\n```\n\n# After\n"))
    (font-lock-ensure)
    (should (eq (forj-menu-test--face-at "# comment") 'forj-markdown-code))
    ;; Fontify again from the comment line only, as redisplay would after an edit.
    (let ((from (save-excursion (goto-char (point-min)) (search-forward "# comment") (line-beginning-position))))
      (font-lock-flush from (point-max))
      (font-lock-ensure from (point-max)))
    (should (eq (forj-menu-test--face-at "# comment") 'forj-markdown-code))
    (should (eq (forj-menu-test--face-at "After") 'forj-markdown-heading))
    (set-buffer-modified-p nil)))

(provide 'forj-menu-test)
;;; forj-menu-test.el ends here
